//go:build tools

// The program this wrapper builds.
package tools

import _ "sigs.k8s.io/cri-tools/cmd/crictl"
