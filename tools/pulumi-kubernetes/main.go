// Command pulumi-resource-kubernetes is the Pulumi Kubernetes provider, built from its Go module.
//
// Upstream's cmd/pulumi-resource-kubernetes/main.go embeds schema-embed.json, a file its Makefile
// generates from schema.json (stamping the version) and that is not part of the published module.
// scripts/bootstrap.sh does the same generation into this folder; this main is otherwise
// identical to upstream's.
package main

import (
	_ "embed"

	"github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/provider"
	"github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version"
)

//go:embed schema-embed.json
var pulumiSchema []byte

//go:embed terraform-mapping-embed.json
var terraformMapping []byte

func main() {
	provider.Serve("kubernetes", version.Version, pulumiSchema, terraformMapping)
}
