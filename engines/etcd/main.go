// Command etcd is etcd's server, built from its Go module (go.etcd.io/etcd/server/v3)
// for burst's engines tier.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
