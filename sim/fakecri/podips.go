package main

import (
	"fmt"
	"net/netip"
	"sync"

	kubeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	apitest "k8s.io/cri-api/pkg/apis/testing"
)

// podIPs hands each new pod sandbox its own address from a /24, as a CNI plugin would, so that two
// pods on one simulated node (e.g. IMEX daemons of two domains) never share an IP:port.
type podIPs struct {
	mu   sync.Mutex
	base netip.Addr
	next int
}

func newPodIPs(cidr string) (*podIPs, error) {
	if cidr == "" {
		return nil, nil
	}
	prefix, err := netip.ParsePrefix(cidr)
	if err != nil || !prefix.Addr().Is4() || prefix.Bits() != 24 {
		return nil, fmt.Errorf("%q is not an IPv4 /24", cidr)
	}
	return &podIPs{base: prefix.Masked().Addr(), next: 1}, nil
}

// runSandbox runs the fake's RunPodSandbox with the next address; the fake reads a package-level
// variable for the sandbox IP, hence the lock around the whole call.
func (p *podIPs) runSandbox(run func() (*kubeapi.RunPodSandboxResponse, error)) (*kubeapi.RunPodSandboxResponse, error) {
	if p == nil {
		return run()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	octets := p.base.As4()
	octets[3] = byte(p.next)
	p.next = p.next%254 + 1
	apitest.FakePodSandboxIPs = []string{netip.AddrFrom4(octets).String()}
	return run()
}
