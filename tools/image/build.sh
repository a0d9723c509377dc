#!/usr/bin/env bash
# Builds the container images the local cluster's containerd nodes run (docs/node-runtime.md) into the
# cache outside the repository, as OCI archives that `ctr images import` takes:
#   ${IMEXDRA_CACHE:-~/.cache/imexdra}/images/pause.tar    registry.k8s.io/pause:$PAUSE_VERSION, the
#       kubelet's sandbox image: Kubernetes' own pause.c (from the k8s.io/kubernetes module the cluster
#       is built from), compiled static, as its Makefile does
#   .../images/ubuntu.tar    docker.io/library/ubuntu:22.04 — a STAND-IN under the name the seeds use:
#       Debian's busybox-static and its applets, nothing else (it says so in /etc/imexdra-stand-in)
# No base image can be pulled on these machines, so root filesystems come from Debian packages fetched
# with `apt-get download` at pinned versions. Idempotent: an image is rebuilt only when the stamp of its
# inputs (this directory, versions, package versions) differs from the one recorded beside it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../k8s/versions.env
source "$here/../k8s/versions.env"
cache_root=${IMEXDRA_CACHE:-$HOME/.cache/imexdra}
out="$cache_root/images"
debs="$cache_root/debs"
mkdir -p "$out" "$debs"
BUSYBOX_DEB="busybox-static=1:1.35.0-4+deb12u1+b1"

log() { printf '[image-build %(%H:%M:%S)T] %s\n' -1 "$*"; }

python=${PYTHON:-python3}
cc=${CC:-cc}

# shellcheck source=../debs.sh
source "$here/../debs.sh"

# current NAME STAMP: true when the archive is there and was built from inputs with that stamp
current() {
  local name=$1 stamp=$2
  [ -f "$out/$name.tar" ] && [ "$(cat "$out/$name.stamp" 2>/dev/null)" = "$stamp" ]
}

stamp_of() { { cat "$here"/*; printf '%s\n' "$@"; } | sha256sum | cut -c1-16; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
start=$SECONDS

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

# -- ubuntu:22.04 stand-in ---------------------------------------------------------------------------
stamp=$(stamp_of "$BUSYBOX_DEB")
if current ubuntu "$stamp"; then
  log "ubuntu:22.04 stand-in: up to date"
else
  log "ubuntu:22.04 stand-in: building from $BUSYBOX_DEB"
  deb=$(fetch_deb "$BUSYBOX_DEB")
  dpkg-deb -x "$deb" "$work/busybox"
  root="$work/ubuntu"
  mkdir -p "$root/bin" "$root/tmp" "$root/etc" "$root/root"
  chmod 1777 "$root/tmp"
  install -m 0755 "$work/busybox/bin/busybox" "$root/bin/busybox"
  for applet in $("$root/bin/busybox" --list); do
    [ "$applet" = busybox ] || ln -s busybox "$root/bin/$applet"
  done
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' > "$root/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' > "$root/etc/group"
  cat > "$root/etc/imexdra-stand-in" <<STANDIN
This is not Ubuntu. It is imexdra's stand-in for docker.io/library/ubuntu:22.04 (tools/image/build.sh),
built because no registry can be reached here: Debian's $BUSYBOX_DEB and its applets.
STANDIN
  "$python" "$here/ociarchive.py" --rootfs "$root" --ref docker.io/library/ubuntu:22.04 \
    --out "$out/ubuntu.tar" --cmd '["/bin/sh"]' --env PATH=/bin \
    --label org.opencontainers.image.description="imexdra stand-in for ubuntu:22.04 (busybox)"
  echo "$stamp" > "$out/ubuntu.stamp"
fi
log "images ready in $out ($((SECONDS - start)) s)"
