#!/usr/bin/env bash
# Builds the mock libnvidia-ml.so.1 (docs/nvml-mock.md) into the cache outside the repository:
#   ${IMEXDRA_CACHE:-~/.cache/imexdra}/nvml-mock/libnvidia-ml.so.1
# Idempotent: rebuilt only when the stamp of its inputs (compiler version, this directory) differs from
# the one recorded next to the library. tools/k8s/build.sh (`make k8s`) runs it; it also runs on its own.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache_root=${IMEXDRA_CACHE:-$HOME/.cache/imexdra}
out="$cache_root/nvml-mock"
lib="$out/libnvidia-ml.so.1"
cc=${CC:-cc}

log() { printf '[nvml-mock-build %(%H:%M:%S)T] %s\n' -1 "$*"; }

if ! command -v "$cc" >/dev/null; then
  log "ERROR: no C compiler ($cc); install gcc"; exit 1
fi
mkdir -p "$out"
stamp=$( { "$cc" --version | head -n 1; find "$here" -type f ! -name '*.md' | LC_ALL=C sort | xargs cat; } \
  | sha256sum | cut -c1-16)
if [ -x "$lib" ] && [ "$(cat "$out/stamp" 2>/dev/null)" = "$stamp" ]; then
  log "nvml-mock: up to date (libnvidia-ml.so.1)"
  exit 0
fi
log "nvml-mock: building libnvidia-ml.so.1..."
start=$SECONDS
tmp=$(mktemp "$out/.libnvidia-ml.XXXXXX")
trap 'rm -f "$tmp"' EXIT
# Hidden by default: the library exports only the NVML entry points marked EXPORT in the source.
"$cc" -std=c11 -O2 -Wall -Wextra -fPIC -shared -fvisibility=hidden -Wl,-soname,libnvidia-ml.so.1 \
  -o "$tmp" "$here/nvml_mock.c" -ldl -pthread
chmod 0755 "$tmp"
# A rename, not a rewrite: processes that have the previous library mapped keep their copy intact.
mv -f "$tmp" "$lib"
echo "$stamp" > "$out/stamp"
log "nvml-mock: done in $((SECONDS - start)) s ($lib)"
