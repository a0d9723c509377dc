#!/usr/bin/env bash
# Upstream's Go ComputeDomain driver (its controller and its kubelet plugin), built from a checkout of
# its source, for the benches' side-by-side modes (bench/README.md "Side by side with upstream"). We
# build them to measure them; none of their code enters ours.
#
#   bench/upstream.sh build-controller <checkout>
#   bench/upstream.sh build-plugin <checkout>
#       go build -mod=vendor (the checkout's vendored modules, GOPROXY=off: no download) of
#       ./cmd/compute-domain-controller (CGO_ENABLED=0) or ./cmd/compute-domain-kubelet-plugin
#       (CGO_ENABLED=1: go-nvml loads libnvidia-ml.so.1 through cgo) into
#       ${IMEXDRA_CACHE:-~/.cache/imexdra}/upstream/<commit, 12 digits>/; prints the binary's path.
#       A binary already there is reused (the plugin takes ~265 s to build on 2 cores).
#   bench/upstream.sh run-controller <checkout> [controller flags...]
#       builds if needed, then runs it. Upstream reads its three object templates from /templates (a
#       path fixed in its source, where its image keeps them): the run happens in a private mount
#       namespace in which the checkout's templates/ is bind-mounted there, so the machine's
#       /templates stays an empty mount point (created once if missing).
#   bench/upstream.sh run-plugin <checkout> [plugin flags...]
#       builds if needed, then runs the kubelet plugin as a host process (as our plugin runs in the
#       integration tier): pass upstream's own flags for the node, driver root, CDI root and kubelet
#       directories (docs/upstream-plugin.md). ALT_PROC_DEVICES_PATH is upstream's own mock-mode
#       variable and passes through.
#
# Environment variables that upstream also reads as flags but whose values are ours (FEATURE_GATES
# names our HostManagedIMEX gate, which upstream refuses; IMEX_MODE and IMEX_ISOLATION spell our
# values) are removed before either program starts; pass upstream's own flags instead.
set -euo pipefail

usage() {
  echo "usage: $0 build-controller|build-plugin|run-controller|run-plugin <checkout> [flags...]" >&2
  exit 2
}

# build <checkout> <cmd name> <cgo 0|1>: prints the binary's path, building it first if missing.
build() {
  local checkout=$1 name=$2 cgo=$3 commit out
  [ -d "$checkout/cmd/$name" ] && [ -d "$checkout/vendor" ] || {
    echo "$checkout is not a checkout of upstream's DRA driver with vendor/ (need cmd/$name)" >&2
    exit 1
  }
  commit=$(git -C "$checkout" rev-parse --short=12 HEAD)
  out=${IMEXDRA_CACHE:-$HOME/.cache/imexdra}/upstream/$commit
  if [ ! -x "$out/$name" ]; then
    mkdir -p "$out"
    echo "[upstream] building $name at $commit (vendored modules, CGO_ENABLED=$cgo)" >&2
    (cd "$checkout" && CGO_ENABLED=$cgo GOPROXY=off GOFLAGS=-mod=vendor \
      go build -o "$out/$name.tmp" "./cmd/$name")
    mv "$out/$name.tmp" "$out/$name"
  fi
  echo "$out/$name"
}

[ $# -ge 2 ] || usage
action=$1 checkout=$(cd "$2" && pwd)
shift 2
case $action in
  build-controller) build "$checkout" compute-domain-controller 0 ;;
  build-plugin) build "$checkout" compute-domain-kubelet-plugin 1 ;;
  run-controller)
    binary=$(build "$checkout" compute-domain-controller 0)
    [ -d /templates ] || mkdir /templates
    unset FEATURE_GATES IMEX_MODE IMEX_ISOLATION
    exec unshare --mount --propagation private sh -c \
      'mount --bind "$1/templates" /templates && shift && exec "$@"' sh "$checkout" "$binary" "$@"
    ;;
  run-plugin)
    binary=$(build "$checkout" compute-domain-kubelet-plugin 1)
    unset FEATURE_GATES IMEX_MODE IMEX_ISOLATION
    exec "$binary" "$@"
    ;;
  *) usage ;;
esac
