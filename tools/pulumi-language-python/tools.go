//go:build tools

// Package tools pins the Pulumi Python language host. Newer releases ship it as the separate
// module github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3, which the Go module
// proxy reachable here refuses (403); v3.79.0 is the newest release where it is still a package
// of github.com/pulumi/pulumi/sdk/v3. See docs/engine.md.
package tools

import _ "github.com/pulumi/pulumi/sdk/v3/python/cmd/pulumi-language-python"
