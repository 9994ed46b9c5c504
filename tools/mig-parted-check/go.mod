module tkf-infra/tools/mig-parted-check

go 1.26.0

require (
	github.com/NVIDIA/go-nvlib v0.12.0
	github.com/NVIDIA/go-nvml v0.13.3-1
	github.com/sirupsen/logrus v1.10.1
	sigs.k8s.io/yaml v1.6.0
)

require (
	github.com/google/uuid v1.6.0 // indirect
	go.yaml.in/yaml/v2 v2.4.2 // indirect
	golang.org/x/sys v0.47.0 // indirect
)
