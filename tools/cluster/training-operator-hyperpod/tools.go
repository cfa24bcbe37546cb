//go:build tools

// A main package cannot be imported; this one keeps the program's dependencies in go.mod.
package tools

import _ "github.com/kubeflow/training-operator/pkg/controller.v1/pytorch"
