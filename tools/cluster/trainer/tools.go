//go:build tools

// A main package cannot be imported; this one keeps the program's dependencies in go.mod.
package tools

import _ "github.com/kubeflow/trainer/v2/pkg/controller"
