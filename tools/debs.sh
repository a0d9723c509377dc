# shellcheck shell=bash
# fetch_deb NAME=VERSION: print the path of that Debian package's .deb in $debs (the build cache),
# downloading it once with `apt-get download` (after an `apt-get update` if apt has no record of it
# yet, as on a fresh machine). $debs may be a symlink (a shared cache). Sourced by tools/k8s/build.sh and tools/image/build.sh; needs $debs.
fetch_deb() {
  local spec=$1 name=${1%%=*} version=${1#*=}
  local file="${name}_*${version#*:}"
  local found; found=$(find "$debs/" -name "${file}_*.deb" | head -n 1)
  if [ -n "$found" ]; then echo "$found"; return; fi
  if ! apt-cache show "$spec" >/dev/null 2>&1; then
    echo "apt has no record of $spec; running apt-get update" >&2
    apt-get update -qq >&2
  fi
  mkdir -p "$debs"
  # apt warns that root downloads "unsandboxed" into a directory its _apt user cannot write; harmless.
  (cd "$debs" && apt-get download -qq "$spec" 2>&1 | grep -v 'unsandboxed' >&2 || true)
  found=$(find "$debs/" -name "${file}_*.deb" | head -n 1)
  if [ -z "$found" ]; then echo "ERROR: could not download $spec from Debian's archive" >&2; exit 1; fi
  echo "$found"
}

# unpack_debs DIR "NAME=VERSION ...": DIR holds those packages' files, unpacked (never installed) once
# per list: DIR/stamp names the list, and a different list unpacks DIR again from nothing. Call it as a
# plain command (not in `if` or `&&`), so that errexit stops the build on a failed download or unpack.
unpack_debs() {
  local dir=$1 specs=$2 spec
  if [ -f "$dir/stamp" ] && [ "$(cat "$dir/stamp")" = "$specs" ]; then return 0; fi
  echo "[debs] unpacking $specs into $dir" >&2
  rm -rf "$dir" && mkdir -p "$dir"
  for spec in $specs; do dpkg-deb -x "$(fetch_deb "$spec")" "$dir"; done
  echo "$specs" > "$dir/stamp"
}
