// Command mig-parted-check validates MIG configs with NVIDIA mig-parted's own parser.
//
// Usage: mig-parted-check FILE [CONFIG...]
//
// FILE is a mig-parted config (the `config.yaml` key of the GPU Operator's mig-manager ConfigMap).
// It is parsed exactly as `nvidia-mig-parted assert --valid-config -f FILE -c CONFIG` parses it
// (ParseConfigFile and GetSelectedMigConfig in cmd/nvidia-mig-parted/assert/assert.go@v0.15.0:171-215,
// using the copied upstream spec in ./migparted), without touching a GPU. Every named CONFIG must be
// present. Prints one JSON line: {"valid": true, "configs": {...}} or {"valid": false, "error": "..."};
// exits 1 when invalid.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"

	"sigs.k8s.io/yaml"

	v1 "tkf-infra/tools/mig-parted-check/migparted/spec/v1"
)

type result struct {
	Valid   bool                      `json:"valid"`
	Error   string                    `json:"error,omitempty"`
	Configs map[string][]configDevice `json:"configs,omitempty"`
}

type configDevice struct {
	Devices    interface{}    `json:"devices"`
	MigEnabled bool           `json:"migEnabled"`
	MigDevices map[string]int `json:"migDevices"`
}

func fail(msg string) {
	out, _ := json.Marshal(result{Valid: false, Error: msg})
	fmt.Println(string(out))
	os.Exit(1)
}

func main() {
	if len(os.Args) < 2 {
		fail("usage: mig-parted-check FILE [CONFIG...]")
	}
	configYaml, err := os.ReadFile(os.Args[1])
	if err != nil {
		fail(fmt.Sprintf("read error: %v", err))
	}
	var spec v1.Spec
	if err := yaml.Unmarshal(configYaml, &spec); err != nil {
		fail(fmt.Sprintf("error parsing config file: unmarshal error: %v", err))
	}
	selected := os.Args[2:]
	if len(selected) == 0 {
		for name := range spec.MigConfigs {
			selected = append(selected, name)
		}
		sort.Strings(selected)
	}
	res := result{Valid: true, Configs: map[string][]configDevice{}}
	for _, name := range selected {
		slice, exists := spec.MigConfigs[name]
		if !exists {
			fail(fmt.Sprintf("error selecting MIG config: selected mig-config not present: %v", name))
		}
		for _, mc := range slice {
			res.Configs[name] = append(res.Configs[name], configDevice{
				Devices: mc.Devices, MigEnabled: mc.MigEnabled, MigDevices: mc.MigDevices})
		}
	}
	out, _ := json.Marshal(res)
	fmt.Println(string(out))
}
