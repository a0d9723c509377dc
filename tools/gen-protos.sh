#!/usr/bin/env bash
# Regenerates the Python stubs in src/imexdra/dra/_pb from protos/*.proto: messages with grpcio-tools'
# protoc (a lint-time tool), services with grpclib's protoc plugin (the runtime serves on grpclib,
# docs/architecture.md §7).
# The protos are placed under imexdra/dra/_pb/ in a scratch include tree so the generated
# modules import each other by their real package path.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-$top/.venv/bin/python}
scratch=$(mktemp -d); trap 'rm -rf "$scratch"' EXIT
pkg=imexdra/dra/_pb
mkdir -p "$scratch/$pkg"
cp "$top"/protos/*.proto "$scratch/$pkg/"
out="$top/src/$pkg"
rm -rf "$out"; mkdir -p "$out"
plugin=$(dirname "$python")/protoc-gen-grpclib_python
(cd "$scratch" && "$python" -m grpc_tools.protoc -I. --python_out="$top/src" --pyi_out="$top/src" \
  --plugin=protoc-gen-grpclib_python="$plugin" --grpclib_python_out="$top/src" $pkg/*.proto)
printf '"""Generated protobuf messages and grpclib service stubs for the kubelet DRA and plugin-registration protocols (make protos); do not edit."""\n' > "$out/__init__.py"
echo "[protos] generated $(ls "$out" | wc -l) files in src/$pkg"
