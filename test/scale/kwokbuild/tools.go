//go:build tools

// Package tools pins kwok, which plays the kubelets of the scale rig's fake nodes.
package tools

import (
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
