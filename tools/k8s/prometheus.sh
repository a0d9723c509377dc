#!/usr/bin/env bash
# Unpacks Debian's prometheus package (PROMETHEUS_DEB in versions.env) into the build cache, never
# installing it: ${IMEXDRA_CACHE:-~/.cache/imexdra}/prometheus-<version>/bin/{prometheus,promtool}.
# Both are Go programs linked against libc only, so they run from there as they are. The tests use them:
# promtool for the chart's alerting rules, prometheus beside the link-fault e2e rack (docs/monitoring.md §4).
# Called by tools/k8s/build.sh (`make k8s`); idempotent (the unpacked directory's stamp names the package).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
cache_root=${IMEXDRA_CACHE:-$HOME/.cache/imexdra}
debs="$cache_root/debs"
# shellcheck source=../debs.sh
source "$here/../debs.sh"
out="$cache_root/prometheus-${PROMETHEUS_DEB#*=}"
unpack_debs "$out" "$PROMETHEUS_DEB"
mkdir -p "$out/bin"
for tool in prometheus promtool; do ln -sf "../usr/bin/$tool" "$out/bin/$tool"; done
"$out/bin/promtool" --version >/dev/null
echo "[prometheus] $out/bin: prometheus, promtool" >&2
