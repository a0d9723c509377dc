#!/usr/bin/env bash
# Builds another Kubernetes release's binaries beside the default one, for the version smoke
# (`make smoke-versions`, docs/kubernetes-versions.md): kube-apiserver, kube-controller-manager,
# kube-scheduler, kubelet, kubectl and kube-proxy of VERSION from the wrapper module
# tools/k8s/kube-<major>.<minor>/ (written by gen-kube-gomod.sh) into
# ${IMEXDRA_CACHE:-~/.cache/imexdra}/k8s-VERSION/bin. Every other binary there (etcd, helm, fakecri,
# the node runtime, ...) and manifests/ are symlinks into the default version's dir, which `make k8s`
# builds first: one node runtime for every version, and the same containerd, so the image seeds
# (imexdra_sim.localcluster.imagestore, keyed by containerd's stat) are shared.
# Idempotent like build.sh. Usage: tools/k8s/build-kube.sh 1.35.8
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
version=${1:?usage: build-kube.sh <kubernetes version, e.g. 1.35.8>}
cache_root=${IMEXDRA_CACHE:-$HOME/.cache/imexdra}
default_out="$cache_root/k8s-$KUBE_VERSION"
out="$cache_root/k8s-$version"
bin="$out/bin"
module="kube-${version%.*}"
# shellcheck source=buildlib.sh
source "$here/buildlib.sh"

if [ "$version" = "$KUBE_VERSION" ]; then
  log "ERROR: $version is the default version; \`make k8s\` builds it"; exit 1
fi
if ! grep -qE "^\s*(require )?k8s.io/kubernetes v$version( // indirect)?\s*$" "$here/$module/go.mod" 2>/dev/null; then
  log "ERROR: tools/k8s/$module/go.mod does not pin k8s.io/kubernetes v$version; run tools/k8s/gen-kube-gomod.sh $version"
  exit 1
fi
if [ ! -x "$default_out/bin/containerd" ]; then
  log "ERROR: $default_out/bin is incomplete; run \`make k8s\` first"; exit 1
fi
mkdir -p "$bin" "$out/stamps"
log "cache: $out"
start=$SECONDS
build_kube "$version" "0.${version#*.}" "$module"
for path in "$default_out"/bin/*; do
  name=$(basename "$path")
  [[ " ${KUBE_BINARIES[*]} " == *" $name "* ]] || ln -sfn "$path" "$bin/$name"
done
ln -sfn "$default_out/manifests" "$out/manifests"
log "Kubernetes $version ready in $bin ($((SECONDS - start)) s; the rest links to $default_out/bin)"
