//go:build tools

// Package tools pins the upstream controller managers scripts/build_controllers.sh builds from this
// module: KServe's LLMInferenceService manager and LeaderWorkerSet's manager, in one module so that
// the Kubernetes libraries both link (k8s.io/api, client-go, controller-runtime: most of their code)
// are compiled once instead of once per manager.
package tools

import (
	_ "github.com/kserve/kserve/cmd/llmisvc"
	_ "sigs.k8s.io/lws/cmd"
)
