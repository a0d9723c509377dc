#!/usr/bin/env bash
# bats-root.sh ROOT LIBS COMMAND...: run COMMAND (upstream's bats suite) with LIBS at /bats-libraries,
# the absolute path the suite's helpers load bats-support/assert/file from (upstream's runner image
# puts them there), without touching the machine's own /: in private PID and mount namespaces, ROOT
# (an empty directory) gets a recursive bind of each top-level directory of /, a copy of each
# top-level symlink, and LIBS at ROOT/bats-libraries; COMMAND runs chrooted there, in the current
# directory. When COMMAND ends, the PID namespace ends every process it left (e.g. `kubectl logs
# --follow &`), and with them the mounts. ROOT is emptied with rmdir only, never a recursive delete.
set -euo pipefail
root=$1 libs=$2; shift 2
if [ "${UPSTREAM_BATS_NS:-}" != "$root" ]; then
  status=0
  UPSTREAM_BATS_NS=$root unshare --pid --fork --mount --propagation private "$0" "$root" "$libs" "$@" ||
    status=$?
  for entry in "$root"/* "$root"/bats-libraries; do
    if [ -L "$entry" ]; then rm -f "$entry"; elif [ -d "$entry" ]; then rmdir "$entry" 2>/dev/null || true; fi
  done
  rmdir "$root" 2>/dev/null || true
  exit "$status"
fi
mkdir -p "$root"
for path in /*; do
  name=${path#/}
  if [ -L "$path" ]; then
    ln -sfn "$(readlink "$path")" "$root/$name"
  elif [ -d "$path" ]; then
    mkdir -p "$root/$name" && mount --rbind "$path" "$root/$name"
  fi
done
mkdir -p "$root/bats-libraries" && mount --rbind "$libs" "$root/bats-libraries"
exec chroot "$root" /usr/bin/env --chdir="$PWD" "$@"
