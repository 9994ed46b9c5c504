//go:build tools

// Package tools pins the Pulumi CLI (github.com/pulumi/pulumi/pkg/v3, command cmd/pulumi). Its
// module carries replace directives, so `go install module@version` refuses it; requiring it from
// this module is the usual way to build it. scripts/bootstrap.sh builds it with the version stamped.
package tools

import _ "github.com/pulumi/pulumi/pkg/v3/cmd/pulumi"
