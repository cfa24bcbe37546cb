//go:build tools

// A main package cannot be imported; this one keeps the program's dependencies in go.mod.
package tools

import _ "sigs.k8s.io/jobset/pkg/controllers"
