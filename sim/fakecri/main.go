// Command fakecri is the container runtime of the local test cluster's simulated nodes.
//
// It serves the CRI (RuntimeService and ImageService) on a unix socket on top of
// k8s.io/cri-client/pkg/fake, so a real, unmodified kubelet can run against it. On top of the fake it:
//
//   - records every CreateContainer request (CDI devices, mounts, env, ...) and container lifecycle
//     events as JSON lines in --record, so tests can see exactly what the kubelet asked for;
//   - runs containers whose image is listed in --exec-config as real host processes, each in a private
//     mount namespace where the container's mounts (hostPath, projected service-account tokens, ...)
//     and the mounts of its CDI devices are bind-mounted at their container paths; host paths are
//     first rewritten with --host-path-map so every simulated node sees its own /var/lib/kubelet,
//     /proc/devices, CDI dir, driver root and so on. A file mount point missing on the host is created
//     in a per-container overlay of its directory, never on the host (overlay.go);
//   - reports such a container as exited (with its exit code) when the process ends, kills it on
//     StopContainer, and runs exec probes for it as real commands in the same mount layout.
//
// Containers with other images stay in-memory fakes, as in kubemark.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"google.golang.org/grpc"
	kubeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-client/pkg/fake"
	"k8s.io/cri-client/pkg/util"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == mountHelperArg {
		runMountHelper(os.Args[2:]) // never returns
	}
	listen := flag.String("listen", "", "CRI endpoint, e.g. unix:///run/node1/cri.sock")
	record := flag.String("record", "", "file to append JSON-lines records of CRI container calls to")
	execConfig := flag.String("exec-config", "", "JSON file mapping image names to host commands")
	hostPathMap := flag.String("host-path-map", "", "comma-separated FROM=TO prefixes applied to mount host paths")
	podCIDR := flag.String("pod-cidr", "", "IPv4 /24 (e.g. 127.100.1.0/24) from which each pod sandbox gets its own IP")
	node := flag.String("node", "", "node name, copied into records")
	cdiDirs := flag.String("cdi-dirs", "", "comma-separated CDI spec dirs of this node; enables CDI resolution")
	flag.Parse()
	if *listen == "" {
		log.Fatal("--listen is required")
	}
	pods, err := newPodIPs(*podCIDR)
	if err != nil {
		log.Fatalf("--pod-cidr: %v", err)
	}
	images, err := loadExecConfig(*execConfig)
	if err != nil {
		log.Fatalf("exec config: %v", err)
	}
	pathMap, err := parseHostPathMap(*hostPathMap)
	if err != nil {
		log.Fatalf("--host-path-map: %v", err)
	}
	recorder, err := newRecorder(*record, *node)
	if err != nil {
		log.Fatalf("record: %v", err)
	}
	defer recorder.Close()

	base := fake.NewFakeRemoteRuntime()
	base.RuntimeService.FakeStatus = &kubeapi.RuntimeStatus{Conditions: []*kubeapi.RuntimeCondition{
		{Type: kubeapi.RuntimeReady, Status: true},
		{Type: kubeapi.NetworkReady, Status: true},
	}}
	// Without filesystem usage the kubelet's eviction manager and summary API log errors every sync.
	usage := []*kubeapi.FilesystemUsage{{
		Timestamp:  1,
		FsId:       &kubeapi.FilesystemIdentifier{Mountpoint: "/"},
		UsedBytes:  &kubeapi.UInt64Value{Value: 1 << 30},
		InodesUsed: &kubeapi.UInt64Value{Value: 1000},
	}}
	base.ImageService.SetFakeFilesystemUsage(usage)
	// The kubelet refuses to create containers from an image whose size is 0 ("Id or size ... not set").
	base.ImageService.SetFakeImageSize(1 << 20)
	base.ImageService.SetFakeContainerFilesystemUsage(usage)

	rt := &runtime{
		RemoteRuntime: base,
		images:        images,
		pathMap:       pathMap,
		recorder:      recorder,
		procs:         map[string]*hostProcess{},
		podIPs:        pods,
	}
	for _, d := range strings.Split(*cdiDirs, ",") {
		if d = strings.TrimSpace(d); d != "" {
			rt.cdiDirs = append(rt.cdiDirs, d)
		}
	}
	server := grpc.NewServer()
	kubeapi.RegisterRuntimeServiceServer(server, rt)
	kubeapi.RegisterImageServiceServer(server, rt)
	listener, err := util.CreateListener(*listen)
	if err != nil {
		log.Fatalf("listen on %s: %v", *listen, err)
	}
	go func() {
		if err := server.Serve(listener); err != nil {
			log.Printf("serve: %v", err)
		}
	}()
	log.Printf("fakecri serving on %s (node %q, %d host-process images)", *listen, *node, len(images))

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	<-ctx.Done()
	log.Printf("fakecri stopping")
	rt.killAll()
	server.Stop()
}

func parseHostPathMap(spec string) ([]pathRewrite, error) {
	var out []pathRewrite
	for _, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		from, to, ok := strings.Cut(item, "=")
		if !ok || from == "" || to == "" {
			return nil, fmt.Errorf("entry %q is not FROM=TO", item)
		}
		out = append(out, pathRewrite{from: strings.TrimSuffix(from, "/"), to: strings.TrimSuffix(to, "/")})
	}
	return out, nil
}
