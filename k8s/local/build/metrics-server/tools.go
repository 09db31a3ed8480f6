//go:build tools

// The program this wrapper builds.
package tools

import _ "sigs.k8s.io/metrics-server/cmd/metrics-server"
