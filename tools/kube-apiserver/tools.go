//go:build tools

// kwok (the cluster tier's simulated kubelets) is required by this module and built beside the control
// plane by scripts/build_kube_apiserver.sh: it links the same Kubernetes libraries (client-go, api,
// apimachinery at this module's v1.36 pins), which one `go build` then compiles once for both.
package main

import _ "sigs.k8s.io/kwok/cmd/kwok"
