// Command coredns is the local cluster's DNS server: CoreDNS, built from its Go module with the plugins
// a kubeadm cluster's default Corefile uses (docs/node-runtime.md, "Cluster DNS"). CoreDNS documents
// this way of choosing plugins at compile time: a main package that imports the plugins it wants and
// runs coremain; the order plugins run in stays CoreDNS's own (dnsserver.Directives).
package main

import (
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

func main() { coremain.Run() }
