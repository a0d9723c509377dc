# Shared by tools/k8s/build.sh and tools/k8s/build-kube.sh (sourced, never run): the log line, the go
# and system-tool checks, the input stamps and build_step, and build_kube, Kubernetes' own binaries.
# The caller sets here (tools/k8s), out (the version's cache dir) and bin ($out/bin) first.
# shellcheck shell=bash
export CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN=local

log() { printf '[k8s-build %(%H:%M:%S)T] %s\n' -1 "$*"; }

if ! command -v go >/dev/null; then
  log "ERROR: go is not installed (need go >= 1.26)"; exit 1
fi
# The node runtime and image builds use these system tools (Debian's base system has them all).
for tool in gcc dpkg-deb apt-get ip unshare nsenter mount sysctl; do
  command -v "$tool" >/dev/null || { log "ERROR: $tool is not installed (needed for the containerd nodes)"; exit 1; }
done
go_minor=$(go env GOVERSION | sed -E 's/^go1\.([0-9]+).*/\1/')
if [ "$go_minor" -lt 26 ]; then
  log "ERROR: $(go env GOVERSION) is too old; Kubernetes $KUBE_VERSION needs go >= 1.26"; exit 1
fi

# stamp_of DIR VERSIONS...: hash of the Go toolchain version, the given version values and every file of
# the module dir, so bumping one component's version rebuilds only that component.
stamp_of() {
  local dir=$1; shift
  (cd "$here" && { go env GOVERSION; printf '%s\n' "$@"; find "$dir" -type f ! -name '*.md' | LC_ALL=C sort | xargs cat; } \
    | sha256sum | cut -c1-16)
}

# build_step NAME MODULE_DIR VERSION OUTPUTS... -- GO_BUILD_ARGS...
build_step() {
  local name=$1 dir=$2 version=$3; shift 3
  local outputs=()
  while [ "$1" != "--" ]; do outputs+=("$1"); shift; done
  shift
  local stamp; stamp=$(stamp_of "$dir" "$version")
  local stampfile="$out/stamps/$name"
  local all_present=1
  for o in "${outputs[@]}"; do [ -x "$bin/$o" ] || all_present=0; done
  if [ "$all_present" = 1 ] && [ "$(cat "$stampfile" 2>/dev/null)" = "$stamp" ]; then
    log "$name: up to date ($(printf '%s ' "${outputs[@]}"))"
    return
  fi
  log "$name: building $(printf '%s ' "${outputs[@]}")..."
  local start=$SECONDS
  (cd "$here/$dir" && go build -trimpath "$@")
  echo "$stamp" > "$stampfile"
  log "$name: done in $((SECONDS - start)) s"
}

# build_kube VERSION STAGING_VERSION MODULE_DIR: kube-apiserver, kube-controller-manager, kube-scheduler,
# kubelet, kubectl and kube-proxy from the wrapper module MODULE_DIR, stamped with the version strings
# Kubernetes' own release build would give them.
KUBE_BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl kube-proxy)
build_kube() {
  local version=$1 staging=$2 dir=$3 ldflags="-s -w" p
  local build_date=2026-01-01T00:00:00Z  # fixed so rebuilds are reproducible
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags="$ldflags -X $p.gitVersion=v$version -X $p.gitMajor=1 -X $p.gitMinor=$(cut -d. -f2 <<<"$version")"
    ldflags="$ldflags -X $p.gitTreeState=clean -X $p.buildDate=$build_date"
    ldflags="$ldflags -X $p.gitCommit=0000000000000000000000000000000000000000"
  done
  build_step kube "$dir" "$version $staging" "${KUBE_BINARIES[@]}" -- \
    -tags=selinux,notest,grpcnotrace -ldflags="$ldflags" -o "$bin/" \
    "${KUBE_BINARIES[@]/#/k8s.io/kubernetes/cmd/}"
}
