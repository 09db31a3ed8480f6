//go:build tools

// The program this wrapper builds.
package tools

import _ "github.com/opencontainers/runc"
