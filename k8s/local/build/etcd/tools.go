//go:build tools

// The program this wrapper builds (the server only: etcdctl is not needed).
package tools

import _ "go.etcd.io/etcd/server/v3"
