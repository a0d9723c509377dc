#!/usr/bin/env bash
# Writes the wrapper module that builds Kubernetes VERSION's binaries (tools/k8s/build-kube.sh) into
# tools/k8s/kube-<major>.<minor>/: k8s.io/kubernetes at VERSION, its own go and godebug lines, and a
# replace for each staging module its go.mod replaces with ./staging (it requires them at v0.0.0,
# which only resolves through replaces) at the matching v0.<minor>.<patch>; then `go mod tidy`.
# The staging list is read from that go.mod because it differs between minors (1.36 added
# cri-streaming and streaming). Usage: tools/k8s/gen-kube-gomod.sh 1.35.8
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
version=${1:?usage: gen-kube-gomod.sh <kubernetes version, e.g. 1.35.8>}
staging_version=0.${version#*.}
dir="$here/kube-${version%.*}"
export GOFLAGS=-mod=mod GOTOOLCHAIN=local
upstream=$(cd /tmp && go mod download -json "k8s.io/kubernetes@v$version" | sed -nE 's/^\s*"GoMod": "(.*)",?$/\1/p')
mkdir -p "$dir"
{
  echo "module imexdra.local/k8sbin"
  echo
  grep -E '^(go|godebug) ' "$upstream"
  echo
  echo "require k8s.io/kubernetes v$version"
  echo
  echo "tool ("
  for c in kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl; do
    echo "	k8s.io/kubernetes/cmd/$c"
  done
  echo ")"
  echo
  echo "replace ("
  sed -nE 's#^\s*(k8s\.io/[a-z-]+) => \./staging/src/k8s\.io/[a-z-]+$#\1#p' "$upstream" | while read -r m; do
    echo "	$m => $m v$staging_version"
  done
  echo ")"
} > "$dir/go.mod"
(cd "$dir" && go mod tidy)
echo "wrote $dir/go.mod and go.sum"
