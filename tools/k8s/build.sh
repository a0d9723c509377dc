#!/usr/bin/env bash
# Builds the local test cluster's binaries from Go modules into a cache outside the repository:
#   ${IMEXDRA_CACHE:-~/.cache/imexdra}/k8s-<version>/bin/{etcd,kube-apiserver,kube-controller-manager,
#   kube-scheduler,kubelet,kubectl,helm,fakecri,imex-probe,mpi-operator} and manifests/mpi-operator/ (CRD, RBAC);
#   imex-probe is the fake fabric's GPU program (docs/fake-fabric.md), static, standard library only;
#   the node runtime: containerd, containerd-shim-runc-v2, ctr, runc and the CNI plugins bridge,
#   host-local and loopback (docs/node-runtime.md); coredns, the cluster DNS of containerd clusters;
#   kube-router-netpol and ipset, the NetworkPolicy enforcer of clusters that run one;
#   oci-registry and crane, the cluster's container registry and the release's pusher;
#   Debian's prometheus and promtool, unpacked into .../prometheus-<version>/bin (tools/k8s/prometheus.sh);
#   first, sim/nvml-mock/build.sh builds the mock libnvidia-ml.so.1 into .../nvml-mock/ (C, seconds);
#   last, tools/image/build.sh builds the nodes' container images into .../images/
# Idempotent: a component is rebuilt only when the stamp of its inputs (versions + go.mod/go.sum/sources)
# differs from the one recorded next to the binaries. Prints progress and the time each step took.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
cache_root=${IMEXDRA_CACHE:-$HOME/.cache/imexdra}
out="$cache_root/k8s-$KUBE_VERSION"
bin="$out/bin"
mkdir -p "$bin" "$out/stamps"
# shellcheck source=buildlib.sh
source "$here/buildlib.sh"

total_start=$SECONDS
log "cache: $out"
"$here/../../sim/nvml-mock/build.sh"

# Three groups of steps run at once (docs/local-cluster.md §3): Kubernetes alone (the largest, about
# 16 min cold on 2 cores); the other Go tools; the node runtime with everything that downloads Debian
# packages (apt runs in one group only), CoreDNS and, last, the images (they pack CoreDNS's binary). A
# cold build spends much of its time downloading, which overlaps with another group's compiles.
build_kubernetes() {
  build_kube "$KUBE_VERSION" "$STAGING_VERSION" kube
}

build_tools() {
  build_step etcd etcd "$ETCD_VERSION" etcd -- -ldflags="-s -w" -o "$bin/etcd" go.etcd.io/etcd/server/v3
  build_step helm helm "$HELM_VERSION" helm -- -ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=v$HELM_VERSION" \
    -o "$bin/helm" helm.sh/helm/v3/cmd/helm

  build_step fakecri ../../sim/fakecri "$STAGING_VERSION" fakecri -- -o "$bin/fakecri" .
  build_step imexprobe ../../sim/imexprobe "" imex-probe -- -ldflags="-s -w" -o "$bin/imex-probe" .
  # The NetworkPolicy enforcer of clusters that ask for one (LocalCluster(network_policy=True)):
  # kube-router's network policy controller alone (tools/k8s/kuberouter/main.go), which runs iptables from
  # the wrappers build_node_and_images writes and ipset, Debian's, unpacked beside iptables (it needs the
  # same libmnl).
  build_step kuberouter kuberouter "$KUBE_ROUTER_VERSION" kube-router-netpol -- -ldflags="-s -w" \
    -o "$bin/kube-router-netpol" .
  # The cluster's container registry and the release's pusher (docs/registry.md): go-containerregistry's
  # registry served over TLS (tools/k8s/oci/main.go) and its crane, which `make release` pushes the image
  # index with; one module, a few seconds.
  build_step oci oci "" oci-registry crane -- -ldflags="-s -w" -o "$bin/" . github.com/google/go-containerregistry/cmd/crane
  build_step mpi-operator mpioperator "$MPI_OPERATOR_VERSION" mpi-operator -- -ldflags="-s -w" -o "$bin/mpi-operator" \
    github.com/kubeflow/mpi-operator/cmd/mpi-operator
  # The MPIJob CRD and the operator's RBAC ship in the same module; keep them next to the binary.
  mpi_dir=$(cd "$here/mpioperator" && go list -m -f '{{.Dir}}' github.com/kubeflow/mpi-operator)
  mkdir -p "$out/manifests/mpi-operator"
  for f in kubeflow.org_mpijobs.yaml cluster-role.yaml cluster-role-binding.yaml service-account.yaml; do
    install -m 0644 "$mpi_dir/manifests/base/$f" "$out/manifests/mpi-operator/$f"
  done
}

build_node_and_images() {
  # The node runtime. runc needs cgo (its nsenter is C) and, for the seccomp profile containerd gives
  # every sandbox, libseccomp: linked statically from Debian's libseccomp-dev, unpacked into the cache
  # (nothing is installed on the machine).
  debs="$cache_root/debs"
  # shellcheck source=../debs.sh
  source "$here/../debs.sh"
  seccomp="$out/libseccomp"
  if [ ! -f "$seccomp/stamp" ] || [ "$(cat "$seccomp/stamp")" != "$LIBSECCOMP_DEB" ]; then
    rm -rf "$seccomp" && mkdir -p "$seccomp"
    dpkg-deb -x "$(fetch_deb "$LIBSECCOMP_DEB")" "$seccomp"
    lib="$seccomp/usr/lib/x86_64-linux-gnu"
    rm -f "$lib"/libseccomp.so  # a link into libseccomp2: without it the linker takes libseccomp.a
    sed -i "s|^prefix=.*|prefix=$seccomp/usr|" "$lib/pkgconfig/libseccomp.pc"
    echo "$LIBSECCOMP_DEB" > "$seccomp/stamp"
  fi
  PKG_CONFIG_PATH="$seccomp/usr/lib/x86_64-linux-gnu/pkgconfig" CGO_ENABLED=1 \
    build_step runc runc "$RUNC_VERSION $LIBSECCOMP_DEB" runc -- -tags=seccomp \
    -ldflags="-s -w -X main.version=$RUNC_VERSION" -o "$bin/runc" github.com/opencontainers/runc
  build_step containerd containerd "$CONTAINERD_VERSION" containerd containerd-shim-runc-v2 ctr -- -tags=no_btrfs \
    -ldflags="-s -w -X github.com/containerd/containerd/v2/version.Version=v$CONTAINERD_VERSION" -o "$bin/" \
    github.com/containerd/containerd/v2/cmd/containerd github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
    github.com/containerd/containerd/v2/cmd/ctr
  build_step cni cni "$CNI_PLUGINS_VERSION" bridge host-local loopback -- -ldflags="-s -w" -o "$bin/" \
    github.com/containernetworking/plugins/plugins/main/bridge \
    github.com/containernetworking/plugins/plugins/ipam/host-local \
    github.com/containernetworking/plugins/plugins/main/loopback
  # iptables for kube-proxy, which runs inside each containerd node's network namespace (never the
  # machine's): Debian's iptables and its libraries, unpacked into the cache; $bin/iptables* are wrappers
  # that run its nf_tables variant with those libraries and extensions.
  ipt="$out/iptables"
  unpack_debs "$ipt" "$IPTABLES_DEBS"
  for tool in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do
    cat > "$bin/$tool" <<WRAPPER
#!/bin/sh
# Debian's $tool (nf_tables variant) from $ipt, written by tools/k8s/build.sh.
LD_LIBRARY_PATH=$ipt/usr/lib/x86_64-linux-gnu XTABLES_LIBDIR=$ipt/usr/lib/x86_64-linux-gnu/xtables \\
  exec $ipt/usr/sbin/xtables-nft-multi $tool "\$@"
WRAPPER
    chmod 0755 "$bin/$tool"
  done
  ipset_dir="$out/ipset"
  unpack_debs "$ipset_dir" "$IPSET_DEBS"
  cat > "$bin/ipset" <<WRAPPER
#!/bin/sh
# Debian's ipset from $ipset_dir (libmnl from $ipt), written by tools/k8s/build.sh.
LD_LIBRARY_PATH=$ipset_dir/usr/lib/x86_64-linux-gnu:$ipt/usr/lib/x86_64-linux-gnu exec $ipset_dir/usr/sbin/ipset "\$@"
WRAPPER
  chmod 0755 "$bin/ipset"
  # Prometheus and promtool (Debian's), for the tests of the chart's alerting rules (docs/monitoring.md §4).
  "$here/prometheus.sh"
  # Cluster DNS for containerd clusters: CoreDNS with the plugins kubeadm's default Corefile uses
  # (tools/k8s/coredns/main.go); tools/image/build.sh packs it as the CoreDNS image.
  build_step coredns coredns "$COREDNS_VERSION" coredns -- -ldflags="-s -w" -o "$bin/coredns" .
  IMEXDRA_CACHE=$cache_root "$here/../image/build.sh"
}

# apt refreshes its lists on a fresh machine before the first download (tools/debs.sh); do it here,
# once, so that the groups' downloads never race for apt's lock.
apt-cache show "$LIBSECCOMP_DEB" >/dev/null 2>&1 || apt-get update -qq
pids=() groups=(build_kubernetes build_tools build_node_and_images)
for group in "${groups[@]}"; do
  # pipefail makes the subshell's status the group's, not sed's.
  ( set -euo pipefail; "$group" 2>&1 | sed -u "s/^/[${group#build_}] /" ) &
  pids+=($!)
done
failed=()
for i in "${!pids[@]}"; do wait "${pids[$i]}" || failed+=("${groups[$i]#build_}"); done
if [ "${#failed[@]}" -gt 0 ]; then log "ERROR: failed: ${failed[*]} (its lines above say why)"; exit 1; fi
log "all binaries ready in $bin ($((SECONDS - total_start)) s)"
