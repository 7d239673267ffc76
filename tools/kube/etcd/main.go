// Command etcd is the etcd server binary of the test control plane (tests/kube), built from
// go.etcd.io/etcd/server/v3 so the version is pinned by this module rather than by a Debian package.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
