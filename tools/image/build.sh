#!/usr/bin/env bash
# Builds the container images the local cluster's containerd nodes run (docs/node-runtime.md) into the
# cache outside the repository, as OCI archives that `ctr images import` takes:
#   ${IMEXDRA_CACHE:-~/.cache/imexdra}/images/pause.tar    registry.k8s.io/pause:$PAUSE_VERSION, the
#       kubelet's sandbox image: Kubernetes' own pause.c (from the k8s.io/kubernetes module the cluster
#       is built from), compiled static, as its Makefile does
#   .../images/ubuntu.tar    docker.io/library/ubuntu:22.04 — a STAND-IN under the name the seeds and
#       upstream's demo specs use: Debian's bash, coreutils and the libraries they need, busybox applets
#       for the other commands, and the seed Deployment's `mnnvl-workload` (standins.sh; it says it is a
#       stand-in in /etc/imexdra-stand-in)
#   .../images/nvbandwidth.tar   ghcr.io/nvidia/k8s-samples:nvbandwidth-v0.7-8d103163 — the seed MPIJob's
#       image, a STAND-IN too: the same root, and the same check as nvbandwidth-stand-in
#   .../images/coredns.tar   registry.k8s.io/coredns/coredns:v$COREDNS_VERSION, the cluster DNS, from the
#       binary tools/k8s/build.sh built from CoreDNS's Go module
#   .../images/imexdra.tar   the project's component image under the reference the chart uses by default
#       (deployments/helm/imexdra: image.repository, tag = appVersion), the recipe of
#       deployments/container/Dockerfile without Docker: a `debootstrap --variant=minbase` bookworm root
#       filesystem with Debian's python3, the venv /opt/imexdra with the wheel and its pinned dependencies
#       (pip inside a chroot), the same env, user and CMD. The values both recipes share live in
#       contract.env (tests/unit/image/test_image_recipes.py holds the Dockerfile to them).
#       One image index for linux/amd64 and linux/arm64 (contract.env's IMAGE_PLATFORMS; docs/image.md):
#       the arm64 root is Debian's arm64 packages unpacked and configured without running them
#       (debootstrap --foreign, debroot.py) and its venv is pip's aarch64 wheels, so nothing of arm64
#       runs here; tests/integration/test_image_arm64.py runs it under qemu user-mode emulation
#       (.../images/qemu-aarch64-static, from Debian's qemu-user-static).
# No base image can be pulled on these machines, so root filesystems come from Debian packages fetched
# with `apt-get download` at pinned versions (the imexdra image's base excepted: debootstrap installs
# bookworm's current packages, see below). Idempotent: an image is rebuilt only when the stamp of its
# inputs (this directory, versions, package versions) differs from the one recorded beside it.
#
# `build.sh --print-imexdra-config` prints the arguments the imexdra image is built with (debootstrap,
# venv steps, smoke test, image config) without building anything: the unit tests compare them with
# the Dockerfile. `build.sh imexdra` (`make image`) builds the imexdra image alone.
# IMEXDRA_IMAGE_PLATFORMS=linux/amd64 leaves arm64 out (a quicker local build; CI builds both).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
# shellcheck source=../k8s/versions.env
source "$here/../k8s/versions.env"
# shellcheck source=contract.env
source "$here/contract.env"
python=${PYTHON:-python3}

# -- what the imexdra image is made of (computed before anything is built, for --print-imexdra-config) --
# The reference: exactly what the chart's pods ask for by default (`{{ repository }}:{{ tag or
# appVersion }}`), normalized as the kubelet and containerd's CRI do (`imexdra:0.1.0` is
# docker.io/library/imexdra:0.1.0), since `ctr images import` stores the name as written.
chart="$top/deployments/helm/imexdra"
chart_repository=$(awk '/^image:/ {b = 1; next} b && /^[^ #]/ {b = 0} b && $1 == "repository:" {print $2}' \
  "$chart/values.yaml" | tr -d "\"'")
chart_tag=$(awk '/^image:/ {b = 1; next} b && /^[^ #]/ {b = 0} b && $1 == "tag:" {print $2}' \
  "$chart/values.yaml" | tr -d "\"'")
[ -n "$chart_tag" ] || chart_tag=$(awk '$1 == "appVersion:" {print $2}' "$chart/Chart.yaml" | tr -d "\"'")
normalize_ref() {
  local ref=$1 first=${1%%/*}
  if [[ $ref != */* ]]; then
    ref=docker.io/library/$ref
  elif [[ $first != *.* && $first != *:* && $first != localhost ]]; then
    ref=docker.io/$ref
  fi
  echo "$ref"
}
imexdra_ref=$(normalize_ref "$chart_repository:$chart_tag")
image_version=$("$python" -c 'import sys, tomllib
print(tomllib.load(sys.stdin.buffer)["project"]["version"])' \
  < "$top/pyproject.toml")
# The revision label: the last commit that touched the wheel's inputs, "-dirty" when the tree differs.
wheel_inputs=(pyproject.toml README.md src)
# Every package of the venv pinned, as the Dockerfile installs it (tools/image/constraints.py).
constraints=deployments/container/constraints.txt
revision=$(git -C "$top" log -1 --format=%H -- "${wheel_inputs[@]}" 2>/dev/null || true)
[ -n "$revision" ] || revision=unknown
if [ -n "$(git -C "$top" status --porcelain -- "${wheel_inputs[@]}" 2>/dev/null || true)" ]; then
  revision+=-dirty
fi
read -r -a image_entry_points <<< "$IMAGE_ENTRY_POINTS"
read -r -a image_env_extra <<< "$IMAGE_ENV"
image_env=("PATH=$IMAGE_VENV/bin:$IMAGE_BASE_PATH" "${image_env_extra[@]}")
debootstrap_args=(--variant=minbase "--include=${IMAGE_PYTHON_PACKAGES// /,}" "$IMAGE_DEBIAN_SUITE")
# The Dockerfile's build stage, step for step, run in the chroot (sh -c: the wheel's name is a glob).
# --only-binary: every dependency from its wheel, so no package's build code runs (docs/image.md).
venv_steps=(
  "python3 -m venv $IMAGE_VENV"
  "$IMAGE_VENV/bin/python -m pip install --quiet pip==$IMAGE_PIP_VERSION"
  "$IMAGE_VENV/bin/python -m pip wheel --quiet --no-deps --wheel-dir /wheels /src"
  "$IMAGE_VENV/bin/python -m pip install --quiet --only-binary=:all: --constraint /src/constraints.txt /wheels/imexdra-*.whl"
)
# The platforms: the build machine's (amd64; debootstrap configures its root) first, then arm64, the
# only other one this script knows how to build (docs/image.md, "The arm64 root").
read -r -a image_platforms <<< "${IMEXDRA_IMAGE_PLATFORMS:-$IMAGE_PLATFORMS}"
case " ${image_platforms[*]} " in
  " linux/amd64 " | " linux/amd64 linux/arm64 ") ;;
  *) echo "build.sh: platforms must be 'linux/amd64' or 'linux/amd64 linux/arm64', not '${image_platforms[*]}'" >&2
     exit 2 ;;
esac
arm64=$([ "${#image_platforms[@]}" = 2 ] && echo 1 || echo 0)
# The arm64 venv: the Dockerfile's last step as pip does it for another machine, run by the amd64
# venv's pip with the arm64 root mounted at /mnt/arm64. The platform tags are those pip computes on a
# Grace tray with the suite's glibc (manylinux_2_17 up to its own, and manylinux2014, the name some
# wheels, protobuf's, carry alone); a wheel tagged otherwise is not taken, and one missing fails.
arm64_wheel_platforms=""
for ((minor = ${IMAGE_GLIBC_VERSION#2.}; minor >= 17; minor--)); do
  arm64_wheel_platforms+=" --platform manylinux_2_${minor}_aarch64"
done
arm64_wheel_platforms+=" --platform manylinux2014_aarch64"
arm64_site_packages="$IMAGE_VENV/lib/python$IMAGE_PYTHON_VERSION/site-packages"
arm64_venv_step="$IMAGE_VENV/bin/python -m pip install --quiet --only-binary=:all: --implementation cp \
--python-version $IMAGE_PYTHON_VERSION --abi cp${IMAGE_PYTHON_VERSION/./}$arm64_wheel_platforms \
--target /mnt/arm64$arm64_site_packages --constraint /src/constraints.txt /wheels/imexdra-*.whl"
smoke_test="for command in ${image_entry_points[*]}; do \"\$command\" --help > /dev/null || exit 1; done"
revision_label="org.opencontainers.image.revision=$revision"
imexdra_oci_args=(--ref "$imexdra_ref" --cmd "$IMAGE_CMD" --user "$IMAGE_USER"
  --label "org.opencontainers.image.title=$IMAGE_TITLE"
  --label "org.opencontainers.image.description=$IMAGE_DESCRIPTION"
  --label "org.opencontainers.image.version=$image_version"
  --label "$revision_label"
  --label "org.opencontainers.image.licenses=$IMAGE_LICENSES")
for kv in "${image_env[@]}"; do imexdra_oci_args+=(--env "$kv"); done

only=""
case "${1:-}" in
  "") ;;
  imexdra) only=imexdra ;;
  --print-imexdra-config)
    printf 'debootstrap\t%s\n' "${debootstrap_args[@]}"
    printf 'python\t%s\n' "$IMAGE_PYTHON_VERSION"
    printf 'venv-step\t%s\n' "${venv_steps[@]}"
    printf 'arm64-venv-step\t%s\n' "$arm64_venv_step"
    printf 'platform\t%s\n' "${image_platforms[@]}"
    printf 'smoke\t%s\n' "$smoke_test"
    printf 'oci\t%s\n' "${imexdra_oci_args[@]}"
    exit 0 ;;
  *) echo "usage: $0 [imexdra | --print-imexdra-config]" >&2; exit 2 ;;
esac

cache_root=${IMEXDRA_CACHE:-$HOME/.cache/imexdra}
out="$cache_root/images"
debs="$cache_root/debs"
mkdir -p "$out" "$debs"
# One build at a time per cache: tools/k8s/build.sh runs this script too, and two concurrent runs would
# delete each other's half-built root filesystems. A second run waits, then finds everything current.
exec 9> "$out/.lock"
if ! flock -n 9; then
  printf '[image-build] waiting for another build of %s\n' "$out" >&2
  flock 9
fi
# qemu-aarch64-static, for running the arm64 image's smoke test on this machine (never for building it).
QEMU_USER_STATIC_DEB="qemu-user-static=1:7.2+dfsg-7+deb12u18+b3"

log() { printf '[image-build %(%H:%M:%S)T] %s\n' -1 "$*"; }

cc=${CC:-cc}
# debootstrap: the host's if installed, else Debian's (a shell script) from its .deb, pinned.
DEBOOTSTRAP_DEB="debootstrap=1.0.128+nmu2+deb12u2"
DEBIAN_MIRROR=${IMEXDRA_DEBIAN_MIRROR:-http://deb.debian.org/debian}
DEBIAN_KEYRING=${IMEXDRA_DEBIAN_KEYRING:-/usr/share/keyrings/debian-archive-keyring.gpg}

# shellcheck source=../debs.sh
source "$here/../debs.sh"

# current NAME STAMP: true when the archive is there and was built from inputs with that stamp
current() {
  local name=$1 stamp=$2
  [ -f "$out/$name.tar" ] && [ "$(cat "$out/$name.stamp" 2>/dev/null)" = "$stamp" ]
}

stamp_of() { { cat "$here"/*; printf '%s\n' "$@"; } | sha256sum | cut -c1-16; }

work=$(mktemp -d)
# The imexdra image's chroot has /proc mounted while pip runs: unmount whatever is still mounted under
# $work (deepest first) before deleting it, and never let rm cross into another file system, so an
# interrupted build can neither leave mounts behind nor delete through one into the host's /proc.
cleanup() {
  local mount
  for mount in $(awk -v w="$work/" 'index($2, w) == 1 {print $2}' /proc/mounts | sort -r); do
    umount "$mount" 2>/dev/null || umount -l "$mount" || true
  done
  rm -rf --one-file-system "$work"
}
trap cleanup EXIT
# Make SIGINT/SIGTERM exit through the EXIT trap too.
trap 'exit 130' INT
trap 'exit 143' TERM
start=$SECONDS

# The local cluster's images; `build.sh imexdra` skips them (they need tools/k8s/build.sh's outputs).
if [ -z "$only" ]; then
# -- pause -------------------------------------------------------------------------------------------
kube_dir=$(cd "$here/../k8s/kube" && GOFLAGS=-mod=mod GOTOOLCHAIN=local go list -m -f '{{.Dir}}' k8s.io/kubernetes)
pause_src="$kube_dir/build/pause/linux/pause.c"
stamp=$(stamp_of "$PAUSE_VERSION" "$("$cc" --version | head -n 1)" "$(sha256sum "$pause_src")")
if current pause "$stamp"; then
  log "pause: up to date"
else
  log "pause: building registry.k8s.io/pause:$PAUSE_VERSION from $pause_src"
  mkdir -p "$work/pause"
  "$cc" -Os -Wall -Werror -static "-DVERSION=v$PAUSE_VERSION-imexdra" -o "$work/pause/pause" "$pause_src"
  "$python" "$here/ociarchive.py" --rootfs "$work/pause" --ref "registry.k8s.io/pause:$PAUSE_VERSION" \
    --out "$out/pause.tar" --entrypoint '["/pause"]' --user 65535:65535
  echo "$stamp" > "$out/pause.stamp"
fi

# -- stand-ins: ubuntu:22.04 and the seed MPIJob's nvbandwidth image (standins.sh) --------------------
# shellcheck source=standins.sh
source "$here/standins.sh"

# -- CoreDNS ----------------------------------------------------------------------------------------
# The cluster DNS of containerd clusters (docs/node-runtime.md, "Cluster DNS"): the static binary
# tools/k8s/build.sh built from CoreDNS's Go module, alone in the image as upstream ships it, under the
# reference kubeadm names it by.
coredns_bin="$cache_root/k8s-$KUBE_VERSION/bin/coredns"
[ -x "$coredns_bin" ] || { log "ERROR: no $coredns_bin; run tools/k8s/build.sh (make k8s)"; exit 1; }
COREDNS_REF="registry.k8s.io/coredns/coredns:v$COREDNS_VERSION"
stamp=$(stamp_of "$COREDNS_REF" "$(sha256sum < "$coredns_bin")")
if current coredns "$stamp"; then
  log "coredns: up to date"
else
  log "coredns: packing $COREDNS_REF from $coredns_bin"
  mkdir -p "$work/coredns"
  install -m 0755 "$coredns_bin" "$work/coredns/coredns"
  "$python" "$here/ociarchive.py" --rootfs "$work/coredns" --ref "$COREDNS_REF" \
    --out "$out/coredns.tar" --entrypoint '["/coredns"]'
  echo "$stamp" > "$out/coredns.stamp"
fi
fi  # the local cluster's images

# -- imexdra component image -------------------------------------------------------------------------
# Step 1, the base: debootstrap's bookworm root filesystem with Debian's python3 (the slow part, about a
# minute, all downloads). Cached on its own stamp — debootstrap's version, its arguments, the mirror —
# so that edits to this script or to the sources do not redo it. Debian's packages are not pinned
# here: debootstrap takes the suite's current ones (bookworm only changes by point releases).
if command -v debootstrap > /dev/null; then
  debootstrap=(debootstrap)
else
  debootstrap_dir="$cache_root/debootstrap/${DEBOOTSTRAP_DEB#*=}"
  if [ ! -x "$debootstrap_dir/usr/sbin/debootstrap" ]; then
    deb=$(fetch_deb "$DEBOOTSTRAP_DEB")
    log "imexdra base: extracting $(basename "$deb") (no debootstrap installed)"
    rm -rf "$debootstrap_dir.tmp"
    mkdir -p "$(dirname "$debootstrap_dir")"
    dpkg-deb -x "$deb" "$debootstrap_dir.tmp"
    mv "$debootstrap_dir.tmp" "$debootstrap_dir"
  fi
  # Debian's debootstrap finds its scripts and functions through DEBOOTSTRAP_DIR when not installed.
  debootstrap=(env "DEBOOTSTRAP_DIR=$debootstrap_dir/usr/share/debootstrap"
    "$debootstrap_dir/usr/sbin/debootstrap")
fi
[ -f "$DEBIAN_KEYRING" ] || { log "ERROR: no Debian archive keyring at $DEBIAN_KEYRING"; exit 1; }
base="$out/imexdra-base-$IMAGE_DEBIAN_SUITE"
base_stamp=$(printf '%s\n' "$("${debootstrap[@]}" --version)" "${debootstrap_args[@]}" "$DEBIAN_MIRROR" \
  | sha256sum | cut -c1-16)
# debootstrap_into DIR LOG [ARGS...]: debootstrap the suite into DIR with ARGS before the usual ones.
# In a mount namespace of its own: debootstrap mounts /proc and /sys inside the target while it
# configures packages; if it dies half-way those mounts die with the namespace instead of staying
# on the host under a directory the next run deletes.
debootstrap_into() {
  local dir=$1 log_file=$2; shift 2
  if ! unshare --mount --propagation private -- "${debootstrap[@]}" --keyring="$DEBIAN_KEYRING" \
      "$@" "${debootstrap_args[@]}" "$dir" "$DEBIAN_MIRROR" > "$log_file" 2>&1; then
    tail -n 20 "$log_file" >&2
    log "ERROR: debootstrap failed; full log: $log_file"
    exit 1
  fi
}
build_base() {
  log "imexdra base: debootstrap ${debootstrap_args[*]} from $DEBIAN_MIRROR"
  local step=$SECONDS
  rm -rf --one-file-system "$base.tmp" "$base" "$base.stamp"
  debootstrap_into "$base.tmp" "$out/imexdra-base.log"
  mv "$base.tmp" "$base"
  echo "$base_stamp" > "$base.stamp"
  log "imexdra base: done, $(du -sh "$base" | cut -f1) ($((SECONDS - step)) s)"
}
if [ -d "$base" ] && [ "$(cat "$base.stamp" 2>/dev/null)" = "$base_stamp" ]; then
  log "imexdra base: debootstrap rootfs up to date"
else
  build_base
fi

# Step 1 for arm64: the same debootstrap for arm64, first stage only (--foreign: download, unpack the
# essential packages, run nothing), then debroot.py unpacks the rest and configures the root from the
# amd64 base above, without running any arm64 code (docs/image.md, "The arm64 root"). Both bases must
# hold the same packages at the same versions; debootstrap takes the suite's current ones, so when
# bookworm has had a point release since the amd64 base was made, that base is made again first.
arm64_base="$base-arm64"
arm64_base_stamp() {
  { echo "$base_stamp"; cat "$base/var/lib/dpkg/status" "$here/debroot.py"; } | sha256sum | cut -c1-16
}
# build_arm64_base: sets arm64_packages_differ=1 (and builds nothing) when debroot.py finds the
# packages differ from the amd64 base's (its exit status 3); any other failure ends the build.
build_arm64_base() {
  log "imexdra arm64 base: debootstrap --foreign --arch=arm64 ${debootstrap_args[*]}, then debroot.py"
  local step=$SECONDS status=0
  rm -rf --one-file-system "$arm64_base.tmp" "$arm64_base" "$arm64_base.stamp"
  debootstrap_into "$arm64_base.tmp" "$out/imexdra-base-arm64.log" --foreign --arch=arm64
  "$python" "$here/debroot.py" --root "$arm64_base.tmp" --debs "$arm64_base.tmp/var/cache/apt/archives" \
    --configured "$base" --arch arm64 || status=$?
  arm64_packages_differ=$([ "$status" = 3 ] && echo 1 || echo 0)
  [ "$status" != 3 ] || return 0
  [ "$status" = 0 ] || exit "$status"
  rm -rf "$arm64_base.tmp/debootstrap"
  mv "$arm64_base.tmp" "$arm64_base"
  arm64_base_stamp > "$arm64_base.stamp"
  log "imexdra arm64 base: done, $(du -sh "$arm64_base" | cut -f1) ($((SECONDS - step)) s)"
}
if [ "$arm64" = 1 ]; then
  if [ -d "$arm64_base" ] && [ "$(cat "$arm64_base.stamp" 2>/dev/null)" = "$(arm64_base_stamp)" ]; then
    log "imexdra arm64 base: up to date"
  else
    build_arm64_base
    if [ "$arm64_packages_differ" = 1 ]; then
      log "imexdra arm64 base: bookworm's packages changed since the amd64 base was made; making both again"
      build_base
      build_arm64_base
      if [ "$arm64_packages_differ" = 1 ]; then
        log "ERROR: the amd64 and arm64 bases still differ (bookworm changing during the build?); run again"
        exit 1
      fi
    fi
  fi
  # The arm64 venv takes wheels up to the contract's glibc: it must be the root's.
  libc6=$(awk '/^Package: libc6$/ {p = 1} p && /^Version:/ {print $2; exit}' "$arm64_base/var/lib/dpkg/status")
  if [ "${libc6%%-*}" != "$IMAGE_GLIBC_VERSION" ]; then
    log "ERROR: the arm64 base's libc6 is $libc6; contract.env's IMAGE_GLIBC_VERSION says $IMAGE_GLIBC_VERSION"
    exit 1
  fi
  # The arm64 smoke test's emulator (tests/integration/test_image_arm64.py): Debian's static
  # qemu-aarch64, alone, from its pinned .deb. Nothing here runs it.
  if [ "$(cat "$out/qemu-aarch64-static.stamp" 2>/dev/null)" != "$QEMU_USER_STATIC_DEB" ]; then
    log "qemu-aarch64-static: unpacking $QEMU_USER_STATIC_DEB"
    mkdir -p "$work/qemu"
    dpkg-deb --fsys-tarfile "$(fetch_deb "$QEMU_USER_STATIC_DEB")" | tar -x -C "$work/qemu" ./usr/bin/qemu-aarch64-static
    install -m 0755 "$work/qemu/usr/bin/qemu-aarch64-static" "$out/qemu-aarch64-static"
    echo "$QEMU_USER_STATIC_DEB" > "$out/qemu-aarch64-static.stamp"
  fi
fi

# Step 2, the image: a copy of the base, the venv built in it as the Dockerfile's build stage does, the
# smoke test, caches stripped, packed. Stamp: this directory (script, contract), the base, the wheel's
# inputs (pyproject.toml, README.md for its metadata, the package sources) and the reference/labels
# but the revision. The revision changes where the contents do not (committing a tree the image was
# built from dirty, say): then the archive is relabelled (ociarchive.py --relabel, about a second,
# the same bytes a build would give) instead of rebuilt (half a minute). imexdra.revision records it.
# With arm64, the arm64 base's stamp and the platforms are in the stamp too, and both roots are made
# side by side: the amd64 chroot's pip and Python install and compile the arm64 venv (docs/image.md).
sources_stamp=$(cd "$top" && find "${wheel_inputs[@]}" "$constraints" -type f ! -path '*/__pycache__/*' ! -name '*.pyc' \
  -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)
stamped_args=()
for arg in "${imexdra_oci_args[@]}"; do
  [ "$arg" = "$revision_label" ] || stamped_args+=("$arg")
done
platforms_stamp=${image_platforms[*]}
[ "$arm64" = 0 ] || platforms_stamp+=" $(arm64_base_stamp)"
stamp=$(stamp_of "$base_stamp" "$sources_stamp" "$platforms_stamp" "${stamped_args[@]}")
if current imexdra "$stamp" && [ "$(cat "$out/imexdra.revision" 2>/dev/null)" = "$revision" ]; then
  log "imexdra: up to date ($imexdra_ref, revision $revision)"
elif current imexdra "$stamp" && [ -f "$out/imexdra.revision" ]; then
  log "imexdra: contents up to date; relabelling revision $(cat "$out/imexdra.revision") -> $revision"
  "$python" "$here/ociarchive.py" --relabel "$out/imexdra.tar" --label "$revision_label" > /dev/null
  echo "$revision" > "$out/imexdra.revision"
else
  log "imexdra: building $imexdra_ref (revision $revision)"
  step=$SECONDS
  root="$work/imexdra"
  # Copy the base's contents ("$base/."), never the base itself: a base that is a symlink (a cache
  # assembled from links to another) would be copied as the link, and the build would then install
  # into and strip the shared base.
  mkdir "$root"
  cp -a "$base/." "$root"
  pack_args=(--rootfs "$root" --platform linux/amd64)
  if [ "$arm64" = 1 ]; then
    root_arm64="$work/imexdra-arm64"
    mkdir "$root_arm64"
    cp -a "$arm64_base/." "$root_arm64"
    pack_args+=(--rootfs "$root_arm64" --platform linux/arm64)
  fi
  # The build context, filtered as /.dockerignore filters it (no bytecode), at /src as in the Dockerfile.
  mkdir -p "$root/src"
  tar -C "$top" --exclude=__pycache__ --exclude='*.pyc' -cf - "${wheel_inputs[@]}" | tar -C "$root/src" -xf -
  cp "$top/$constraints" "$root/src/constraints.txt"
  # pip in the chroot needs /proc, DNS, and the CA bundle the host trusts (a TLS-intercepting proxy's CA
  # may be in it; pip's own certifi would not know it). All three are removed again below.
  mount -t proc proc "$root/proc"
  cp -L /etc/resolv.conf "$root/etc/resolv.conf"
  # A clean environment: nothing of the host's (pip config, PYTHON*, virtualenv) leaks into the build
  # but the index and proxy settings it may need to reach PyPI.
  build_env=(env -i HOME=/root LANG=C.UTF-8 "PATH=$IMAGE_BASE_PATH"
    PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PYTHONDONTWRITEBYTECODE=1)
  host_ca=${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}
  if [ -f "$host_ca" ]; then
    cp -L "$host_ca" "$root/tmp/imexdra-build-ca.crt"
    build_env+=(PIP_CERT=/tmp/imexdra-build-ca.crt)
  fi
  for var in PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_DEFAULT_TIMEOUT \
      http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY; do
    if [ -n "${!var:-}" ]; then build_env+=("$var=${!var}"); fi
  done
  log "imexdra: $(chroot "$root" "${build_env[@]}" python3 --version) in the chroot; creating $IMAGE_VENV"
  for index in "${!venv_steps[@]}"; do
    chroot "$root" "${build_env[@]}" sh -c "${venv_steps[index]}"
    # After the first two steps the venv holds Debian's python3 links, the activate scripts and pip:
    # no file of it depends on the CPU, so it is the arm64 image's venv too, before the wheels go in.
    if [ "$index" = 1 ] && [ "$arm64" = 1 ]; then cp -a "$root$IMAGE_VENV" "$root_arm64$IMAGE_VENV"; fi
  done
  if [ "$arm64" = 1 ]; then
    mkdir -p "$root/mnt/arm64"
    mount --bind "$root_arm64" "$root/mnt/arm64"
    chroot "$root" "${build_env[@]}" sh -c "$arm64_venv_step"
    # pip --target puts console scripts under the target; a venv's are in bin/, which its RECORD
    # names from site-packages as ../../../bin/ (--target's layout: ../../bin/).
    site="$root_arm64$arm64_site_packages"
    mv "$site"/bin/* "$root_arm64$IMAGE_VENV/bin/"
    rmdir "$site/bin"
    sed -i 's|^\.\./\.\./bin/|../../../bin/|' "$site"/*.dist-info/RECORD
    # Both venvs hold the same distributions at the same versions (only their wheels' tags differ).
    if ! diff <(cd "$root$arm64_site_packages" && ls -d ./*.dist-info) <(cd "$site" && ls -d ./*.dist-info); then
      log "ERROR: the amd64 and arm64 venvs hold different distributions"
      exit 1
    fi
  fi
  # The archive fixes every mtime (ociarchive.py, for reproducible digests), so the timestamp-checked
  # bytecode pip and Debian wrote would never match its source again: every Python start in a
  # container would compile each module it imports (seconds of CPU per daemon probe, every second,
  # on every node). Hash-checked bytecode is valid whatever the mtimes (PEP 552); the Dockerfile's
  # image keeps its mtimes and needs none of this (docs/node-runtime.md §1).
  chroot "$root" "${build_env[@]}" python3 -m compileall -q -f -j 0 --invalidation-mode checked-hash \
    "/usr/lib/python$IMAGE_PYTHON_VERSION" /usr/lib/python3 "$IMAGE_VENV"
  # The arm64 root's bytecode, compiled by the same Debian Python 3.11 (bytecode does not depend on
  # the CPU; its magic number, on the minor version alone), with its paths as the arm64 root sees them.
  if [ "$arm64" = 1 ]; then
    chroot "$root" "${build_env[@]}" python3 -m compileall -q -f -j 0 --invalidation-mode checked-hash \
      -s /mnt/arm64 -p / "/mnt/arm64/usr/lib/python$IMAGE_PYTHON_VERSION" /mnt/arm64/usr/lib/python3 \
      "/mnt/arm64$IMAGE_VENV"
    umount "$root/mnt/arm64"
  fi
  log "imexdra: venv ready ($((SECONDS - step)) s); smoke test: each entry point --help"
  # The smoke test runs in the image's own environment (its PATH finds the console scripts).
  chroot "$root" env -i HOME=/root "${image_env[@]}" sh -c "$smoke_test"
  umount "$root/proc"
  rmdir "$root/mnt/arm64" 2>/dev/null || true
  # Strip what the image does not need, as debian:bookworm-slim and `rm -rf /var/lib/apt/lists/*` do:
  # build leftovers, pip and apt caches, apt lists, logs, the host's resolv.conf/hostname that
  # debootstrap copied in, device nodes (the runtime mounts /dev), and docs except the copyrights.
  for stripped in "$root" ${root_arm64:+"$root_arm64"}; do
    rm -rf "$stripped/src" "$stripped/wheels" "$stripped/root/.cache" "$stripped/etc/resolv.conf" \
      "$stripped/etc/hostname"
    find "$stripped/tmp" "$stripped/var/tmp" "$stripped/dev" "$stripped/usr/share/man" \
      "$stripped/usr/share/info" "$stripped/usr/share/locale" -mindepth 1 -delete
    # Files only: apt expects its directories (lists/partial, archives/partial) in derived images.
    find "$stripped/var/cache/apt" "$stripped/var/lib/apt/lists" "$stripped/var/log" ! -type d -delete
    find "$stripped/usr/share/doc" ! -type d ! -name copyright -delete
    find "$stripped/usr/share/doc" -mindepth 1 -type d -empty -delete
    rm -f "$stripped"/var/cache/debconf/*-old "$stripped"/var/lib/dpkg/*-old
  done
  "$python" "$here/ociarchive.py" "${pack_args[@]}" --out "$out/imexdra.tar" "${imexdra_oci_args[@]}"
  echo "$stamp" > "$out/imexdra.stamp"
  echo "$revision" > "$out/imexdra.revision"
  sizes=""
  for sized in "$root" ${root_arm64:+"$root_arm64"}; do
    sizes+=" $(du -s --apparent-size --block-size=1M "$sized" | cut -f1) MB"
  done
  log "imexdra: done, $(du -h "$out/imexdra.tar" | cut -f1) (${image_platforms[*]}:$sizes) ($((SECONDS - step)) s)"
fi
log "images ready in $out ($((SECONDS - start)) s)"
