#!/usr/bin/env bash
# Creates or refreshes .venv with the project and its pinned test and lint dependencies, plus the
# test and demo equipment imexdra-sim (sim/: local cluster, simulated rack, hardware fakes), both editable.
# Idempotent: reinstalls only when a pyproject.toml changed since the last successful install.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
venv="$top/.venv"
# The tests run on the Python the image ships (tools/image/contract.env), so what passes here runs there.
image_python=$(sed -n "s/^IMAGE_PYTHON_VERSION='\(.*\)'$/\1/p" "$top/tools/image/contract.env")
python=${PYTHON:-python$image_python}
if ! command -v "$python" > /dev/null; then
  echo "ERROR: $python not found: the tests run on the image's Python $image_python." >&2
  echo "Install it (Debian: apt-get install python$image_python-venv) or set PYTHON to one." >&2
  exit 1
fi
found=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [ "$found" != "$image_python" ]; then
  echo "ERROR: $python is Python $found; the image ships $image_python (tools/image/contract.env)." >&2; exit 1
fi
if [ -x "$venv/bin/python" ] && [ "$("$venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" != "$image_python" ]; then
  echo "[venv] $venv is not Python $image_python: making it again"
  rm -rf "$venv"
fi
# The image's pins (deployments/container/constraints.txt) hold here too: the tests run on the
# versions the image ships (docs/node-runtime.md).
constraints="$top/deployments/container/constraints.txt"
stamp=$(cat "$top/pyproject.toml" "$top/sim/pyproject.toml" "$constraints" | sha256sum | cut -c1-16)
if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.imexdra-stamp" 2>/dev/null)" = "$stamp" ]; then
  exit 0
fi
echo "[venv] installing imexdra with test and lint dependencies, and imexdra-sim, into $venv"
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip==25.3
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --constraint "$constraints" \
  -e "$top[test,lint]" -e "$top/sim"
echo "$stamp" > "$venv/.imexdra-stamp"
echo "[venv] ready"
