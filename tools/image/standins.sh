# shellcheck shell=bash
# The stand-in images of tools/image/build.sh (sourced by it; needs its $work, $out, $here, $python,
# fetch_deb, unpack_debs, current, stamp_of and log). No registry can be reached here, so the images the
# seeds' and upstream's workloads name are built under those names from Debian packages, and each says
# in /etc/imexdra-stand-in that it is not the image it stands in for (docs/node-runtime.md §1):
#   docker.io/library/ubuntu:22.04     what users of the real image run: Debian's bash, dash as /bin/sh,
#       coreutils, grep, sed and findutils with the libraries they link (libc6 ...), in Ubuntu's
#       merged-/usr layout; busybox applets only for the commands none of those packages has (nc,
#       nslookup, ps, ...); and `mnnvl-workload`, the seed Deployment's program (workload-stand-in)
#   ghcr.io/nvidia/k8s-samples:nvbandwidth-v0.7-8d103163   the seed MPIJob's image: the same root, the
#       channel check as nvbandwidth-stand-in, and an sshd that says it is none
# Pinned as bookworm has them; Debian's archive drops a superseded point-release version, and then
# the pin is raised (the build says which package it could not download).

BUSYBOX_DEB="busybox-static=1:1.35.0-4+deb12u1+b1"
STANDIN_DEBS="libc6=2.36-9+deb12u14 libtinfo6=6.4-4 libacl1=2.3.1-3 libattr1=1:2.5.1-4 \
libselinux1=3.4-1+b6 libpcre2-8-0=10.42-1+deb12u2 libgmp10=2:6.2.1+dfsg1-1.1 \
bash=5.2.15-2+b13 dash=0.5.12-2 coreutils=9.1-1 grep=3.8-5 sed=4.9-1+deb12u1 findutils=4.9.0-4"
NVBANDWIDTH_REF=ghcr.io/nvidia/k8s-samples:nvbandwidth-v0.7-8d103163

# standin_root DIR WHAT: the Debian packages above unpacked (never configured: their maintainer scripts
# only register alternatives and docs) into a merged-/usr root as Ubuntu's, busybox applets for the
# names still missing, a passwd/group, and the note saying the image is a stand-in for WHAT.
standin_root() {
  local root=$1 what=$2 debs_dir="$work/standin-debs" dir applet name
  unpack_debs "$debs_dir" "$STANDIN_DEBS"
  [ -d "$work/busybox" ] || dpkg-deb -x "$(fetch_deb "$BUSYBOX_DEB")" "$work/busybox"
  mkdir -p "$root/usr" "$root/etc" "$root/tmp" "$root/root" "$root/usr/local/bin"
  chmod 1777 "$root/tmp"
  for dir in bin sbin lib lib64; do
    mkdir -p "$root/usr/$dir"
    ln -s "usr/$dir" "$root/$dir"
    [ ! -d "$debs_dir/$dir" ] || cp -a "$debs_dir/$dir/." "$root/usr/$dir/"
  done
  cp -a "$debs_dir/usr/." "$root/usr/"
  cp -a "$debs_dir/etc/." "$root/etc/"
  # What a container never reads: translations, manuals, charset modules (the tools need none beyond
  # glibc's built-in ones); the packages' copyright files stay, as in Debian's and Ubuntu's images.
  rm -rf "$root/usr/share/locale" "$root/usr/share/man" "$root/usr/share/info" "$root/usr/share/lintian" \
    "$root/usr/share/doc-base" "$root/usr/share/menu" "$root/usr/lib/x86_64-linux-gnu/gconv"
  find "$root/usr/share/doc" ! -type d ! -name copyright -delete
  find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete
  install -m 0755 "$work/busybox/bin/busybox" "$root/usr/bin/busybox"
  for applet in $("$work/busybox/bin/busybox" --list-full); do
    case $applet in bin/* | sbin/*) applet=usr/$applet ;; usr/bin/* | usr/sbin/*) ;; *) continue ;; esac
    name=${applet##*/}
    [ -e "$root/usr/bin/$name" ] || [ -e "$root/usr/sbin/$name" ] || ln -s /usr/bin/busybox "$root/$applet"
  done
  printf 'root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n' \
    > "$root/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' > "$root/etc/group"
  cat > "$root/etc/imexdra-stand-in" <<STANDIN
This is not $what. It is imexdra's stand-in for it (tools/image/build.sh),
built because no registry can be reached here: Debian's bash, dash, coreutils, grep, sed and
findutils with their libraries ($STANDIN_DEBS),
and $BUSYBOX_DEB's applets for the other commands.
STANDIN
}

# pack_standin DIR REF NAME DESCRIPTION CMD: DIR packed as REF into $out/NAME.tar, with Ubuntu's PATH.
pack_standin() {
  "$python" "$here/ociarchive.py" --rootfs "$1" --ref "$2" --out "$out/$3.tar" --cmd "$5" \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --label org.opencontainers.image.description="imexdra stand-in for $4 (Debian's bash and coreutils)"
}

stamp=$(stamp_of "$BUSYBOX_DEB" "$STANDIN_DEBS")
if current ubuntu "$stamp"; then
  log "ubuntu:22.04 stand-in: up to date"
else
  log "ubuntu:22.04 stand-in: building from Debian's bash, coreutils and $BUSYBOX_DEB"
  standin_root "$work/ubuntu" "Ubuntu (docker.io/library/ubuntu:22.04)"
  # The seed Deployment runs `mnnvl-workload` from this image: the hardware boundary's GPU program.
  install -m 0755 "$here/workload-stand-in" "$work/ubuntu/usr/local/bin/mnnvl-workload"
  pack_standin "$work/ubuntu" docker.io/library/ubuntu:22.04 ubuntu ubuntu:22.04 '["bash"]'
  echo "$stamp" > "$out/ubuntu.stamp"
fi

# The seed MPIJob's image (CoreWeave's GB200 example): launcher and workers. Its program is the
# hardware boundary, so the stand-in checks the IMEX channel and says it is a stand-in
# (workload-stand-in, installed as nvbandwidth-stand-in); the launcher runs `/bin/bash -c`; the MPI
# Operator starts workers as `/usr/sbin/sshd -De`, which here says it is no ssh server and runs the check.
if current nvbandwidth "$stamp"; then
  log "nvbandwidth stand-in: up to date"
else
  log "nvbandwidth stand-in: building $NVBANDWIDTH_REF"
  root="$work/nvbandwidth"
  standin_root "$root" "NVIDIA's nvbandwidth sample ($NVBANDWIDTH_REF)"
  install -m 0755 "$here/workload-stand-in" "$root/usr/local/bin/nvbandwidth-stand-in"
  rm -f "$root/usr/sbin/sshd"
  printf '#!/bin/sh\necho "sshd STAND-IN (imexdra): no ssh server in this image; running the channel check"\n%s\n' \
    'exec /usr/local/bin/nvbandwidth-stand-in' > "$root/usr/sbin/sshd"
  chmod 0755 "$root/usr/sbin/sshd"
  pack_standin "$root" "$NVBANDWIDTH_REF" nvbandwidth "the nvbandwidth sample" '["/usr/local/bin/nvbandwidth-stand-in"]'
  echo "$stamp" > "$out/nvbandwidth.stamp"
fi
