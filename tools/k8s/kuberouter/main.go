// Command kube-router-netpol is the local cluster's NetworkPolicy enforcer: kube-router's network
// policy controller (iptables and ipset), built from its Go module and run on its own, as k3s embeds
// it (docs/node-runtime.md §10). It takes kube-router's own flags and runs what
// `kube-router --run-firewall --run-router=false --run-service-proxy=false` runs: the controller's
// informers, its health heartbeats and its full syncs. kube-router's routing (GoBGP) and service proxy
// (IPVS) controllers are not linked in; asking for them is an error.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/cloudnativelabs/kube-router/v2/pkg/controllers/netpol"
	"github.com/cloudnativelabs/kube-router/v2/pkg/healthcheck"
	"github.com/cloudnativelabs/kube-router/v2/pkg/options"
	"github.com/spf13/pflag"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "kube-router-netpol: %s\n", err)
		os.Exit(1)
	}
}

func run() error {
	klog.InitFlags(nil)
	config := options.NewKubeRouterConfig()
	config.AddFlags(pflag.CommandLine)
	pflag.Parse()
	if err := flag.Set("logtostderr", "true"); err != nil {
		return err
	}
	if err := flag.Set("v", config.VLevel); err != nil {
		return err
	}
	if !config.RunFirewall || config.RunRouter || config.RunServiceProxy || config.RunLoadBalancer {
		return fmt.Errorf("only the network policy controller is built in: " +
			"pass --run-firewall --run-router=false --run-service-proxy=false")
	}
	if config.Kubeconfig == "" {
		return fmt.Errorf("--kubeconfig is required")
	}
	clientConfig, err := clientcmd.BuildConfigFromFlags(config.Master, config.Kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	client, err := kubernetes.NewForConfig(clientConfig)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}

	// The shape of kube-router's own pkg/cmd KubeRouter.Run, firewall part only.
	var wg sync.WaitGroup
	var ipsetMutex sync.Mutex
	stopCh := make(chan struct{})
	healthChan := make(chan *healthcheck.ControllerHeartbeat, 10)
	hc, err := healthcheck.NewHealthController(config)
	if err != nil {
		return fmt.Errorf("health controller: %w", err)
	}
	wg.Add(1)
	go hc.RunServer(stopCh, &wg)

	factory := informers.NewSharedInformerFactory(client, 0)
	podInformer := factory.Core().V1().Pods().Informer()
	nsInformer := factory.Core().V1().Namespaces().Informer()
	npInformer := factory.Networking().V1().NetworkPolicies().Informer()
	factory.Start(stopCh)
	synced := make(chan struct{})
	go func() { factory.WaitForCacheSync(stopCh); close(synced) }()
	select {
	case <-synced:
	case <-time.After(config.CacheSyncTimeout):
		return fmt.Errorf("informer caches not synced after %s", config.CacheSyncTimeout)
	}
	hc.SetAlive()
	wg.Add(1)
	go hc.RunCheck(healthChan, stopCh, &wg)

	iptables, ipsets, err := netpol.NewIPTablesHandlers(config)
	if err != nil {
		return fmt.Errorf("iptables handlers: %w", err)
	}
	npc, err := netpol.NewNetworkPolicyController(client, config, podInformer, npInformer, nsInformer,
		&ipsetMutex, iptables, ipsets)
	if err != nil {
		return fmt.Errorf("network policy controller: %w", err)
	}
	if _, err := podInformer.AddEventHandler(npc.PodEventHandler); err != nil {
		return err
	}
	if _, err := nsInformer.AddEventHandler(npc.NamespaceEventHandler); err != nil {
		return err
	}
	if _, err := npInformer.AddEventHandler(npc.NetworkPolicyEventHandler); err != nil {
		return err
	}
	wg.Add(1)
	go npc.Run(healthChan, stopCh, &wg)

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	<-signals
	klog.Info("Shutting down the network policy controller")
	close(stopCh)
	wg.Wait()
	return nil
}
