#!/usr/bin/env bash
# Upstream's Go ComputeDomain controller, built from a checkout of its source, for the benches'
# side-by-side mode (bench/README.md "Side by side with upstream"). We build it to measure it; none
# of its code enters ours.
#
#   bench/upstream_controller.sh build <checkout>
#       go build -mod=vendor ./cmd/compute-domain-controller (the checkout's vendored modules, no
#       download) into ${IMEXDRA_CACHE:-~/.cache/imexdra}/upstream/<commit>/; prints the binary's path.
#   bench/upstream_controller.sh run <checkout> [controller flags...]
#       builds if needed, then runs it. Upstream reads its three object templates from /templates (a
#       path fixed in its source, where its image keeps them): the run happens in a private mount
#       namespace in which the checkout's templates/ is bind-mounted there, so the machine's
#       /templates stays an empty mount point (created once if missing). Environment variables that
#       upstream also reads as flags but whose values are ours (FEATURE_GATES names our
#       HostManagedIMEX gate, which upstream refuses) are removed; pass upstream's own flags instead.
set -euo pipefail

usage() {
  echo "usage: $0 build <checkout> | run <checkout> [controller flags...]" >&2
  exit 2
}

build() {
  local checkout=$1 commit out
  [ -d "$checkout/cmd/compute-domain-controller" ] && [ -d "$checkout/vendor" ] || {
    echo "$checkout is not a checkout of NVIDIA/k8s-dra-driver-gpu with vendor/ (need cmd/compute-domain-controller)" >&2
    exit 1
  }
  commit=$(git -C "$checkout" rev-parse --short=12 HEAD)
  out=${IMEXDRA_CACHE:-$HOME/.cache/imexdra}/upstream/$commit
  if [ ! -x "$out/compute-domain-controller" ]; then
    mkdir -p "$out"
    echo "[upstream] building compute-domain-controller at $commit (vendored modules)" >&2
    (cd "$checkout" && CGO_ENABLED=0 go build -mod=vendor -o "$out/compute-domain-controller.tmp" \
      ./cmd/compute-domain-controller)
    mv "$out/compute-domain-controller.tmp" "$out/compute-domain-controller"
  fi
  echo "$out/compute-domain-controller"
}

[ $# -ge 2 ] || usage
action=$1 checkout=$(cd "$2" && pwd)
shift 2
case $action in
  build) build "$checkout" ;;
  run)
    binary=$(build "$checkout")
    [ -d /templates ] || mkdir /templates
    unset FEATURE_GATES IMEX_MODE IMEX_ISOLATION
    exec unshare --mount --propagation private sh -c \
      'mount --bind "$1/templates" /templates && shift && exec "$@"' sh "$checkout" "$binary" "$@"
    ;;
  *) usage ;;
esac
