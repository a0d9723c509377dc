#!/usr/bin/env bash
# Creates or refreshes .venv with the project and its pinned test and lint dependencies, plus the
# test and demo equipment imexdra-sim (sim/: local cluster, simulated rack, hardware fakes), both editable.
# Idempotent: reinstalls only when a pyproject.toml changed since the last successful install.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
venv="$top/.venv"
python=${PYTHON:-python3}
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "ERROR: $python is older than 3.11" >&2; exit 1
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
