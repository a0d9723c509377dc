"""Write a one-layer OCI image archive (an image layout in a tar) from a root filesystem directory.

The local cluster's nodes run containerd, which cannot pull here (no registry is reachable), so
tools/image/build.sh assembles each image's root filesystem from Debian packages and our own builds and
this module packs it the way `docker save` / `buildah push oci-archive:` would: one uncompressed layer,
an image config, a manifest and an index whose entry carries the full reference name
(``io.containerd.image.name``), which `ctr images import` tags the image with. Why not umoci or
buildah: either needs a bundle or a storage driver of its own; this is ~100 lines of the OCI image
spec with no dependency, and byte-for-byte reproducible (sorted entries, fixed mtimes), so the build
cache can compare digests (docs/node-runtime.md).

Usage: python3 ociarchive.py --rootfs DIR --ref NAME:TAG --out FILE.tar [--entrypoint JSON]
       [--cmd JSON] [--env K=V ...] [--user U] [--workdir D] [--label K=V ...]
       python3 ociarchive.py --relabel FILE.tar --label K=V ...   (the layer stays; see ``relabel``)
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import tarfile
from pathlib import Path
from typing import IO, Any

DEFAULT_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
EPOCH = 0
"""Every mtime in a layer: the same rootfs gives the same digest on every machine."""


def _layer(rootfs: Path) -> bytes:
    """The rootfs as an uncompressed tar, entries sorted, owners and modes kept, mtimes fixed."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        paths = sorted(rootfs.rglob("*"), key=lambda p: p.relative_to(rootfs).as_posix())
        for path in paths:
            info = tar.gettarinfo(str(path), arcname=path.relative_to(rootfs).as_posix())
            info.mtime = EPOCH
            info.uname = info.gname = ""
            info.pax_headers = {}
            if info.isreg():
                with path.open("rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
    return buffer.getvalue()


def _blob(tar: tarfile.TarFile, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    info = tarfile.TarInfo(f"blobs/sha256/{digest}")
    info.size, info.mtime, info.mode = len(data), EPOCH, 0o644
    tar.addfile(info, io.BytesIO(data))
    return f"sha256:{digest}"


def _json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def write_archive(rootfs: Path, ref: str, out: Path, config: dict[str, Any], labels: dict[str, str]) -> str:
    """Write the archive; return the manifest digest."""
    layer = _layer(rootfs)
    layer_digest = "sha256:" + hashlib.sha256(layer).hexdigest()
    image_config = {
        "architecture": "amd64",
        "os": "linux",
        "created": "1970-01-01T00:00:00Z",
        "config": {**config, "Labels": labels},
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
        "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "tools/image/build.sh"}],
    }
    return _pack(out, ref, _json(image_config), layer_digest, len(layer), io.BytesIO(layer))


def relabel(archive: Path, labels: dict[str, str]) -> str:
    """Set ``labels`` in ``archive``'s image config, in place; return the new manifest digest.

    The layer is copied as it is, so this takes a second where rebuilding the project's image takes
    half a minute; the result is byte for byte what ``write_archive`` writes with those labels.
    """
    with tarfile.open(archive) as old:
        index = json.loads(_member(old, "index.json"))
        [entry] = index["manifests"]
        manifest = json.loads(_member(old, _blob_name(entry["digest"])))
        image_config = json.loads(_member(old, _blob_name(manifest["config"]["digest"])))
        image_config["config"]["Labels"] = {**image_config["config"].get("Labels", {}), **labels}
        [layer] = manifest["layers"]
        layer_file = old.extractfile(_blob_name(layer["digest"]))
        assert layer_file is not None
        ref = entry["annotations"]["io.containerd.image.name"]
        return _pack(archive, ref, _json(image_config), layer["digest"], layer["size"], layer_file)


def _member(tar: tarfile.TarFile, name: str) -> bytes:
    member = tar.extractfile(name)
    if member is None:
        raise ValueError(f"{name} is not a file in {tar.name!r}")
    return member.read()


def _blob_name(digest: str) -> str:
    return "blobs/" + digest.replace(":", "/", 1)


def _pack(
    out: Path, ref: str, config_bytes: bytes, layer_digest: str, layer_size: int, layer: IO[bytes]
) -> str:
    """Write the layout (config, layer, manifest, index; always in this order) to ``out`` atomically."""
    tmp = out.with_suffix(".tmp")
    with tarfile.open(tmp, mode="w", format=tarfile.PAX_FORMAT) as tar:
        layout = _json({"imageLayoutVersion": "1.0.0"})
        info = tarfile.TarInfo("oci-layout")
        info.size, info.mtime, info.mode = len(layout), EPOCH, 0o644
        tar.addfile(info, io.BytesIO(layout))
        config_digest = _blob(tar, config_bytes)
        info = tarfile.TarInfo(_blob_name(layer_digest))
        info.size, info.mtime, info.mode = layer_size, EPOCH, 0o644
        tar.addfile(info, layer)
        manifest = _json(
            {
                "schemaVersion": 2,
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {
                    "mediaType": "application/vnd.oci.image.config.v1+json",
                    "digest": config_digest,
                    "size": len(config_bytes),
                },
                "layers": [
                    {
                        "mediaType": "application/vnd.oci.image.layer.v1.tar",
                        "digest": layer_digest,
                        "size": layer_size,
                    }
                ],
            }
        )
        manifest_digest = _blob(tar, manifest)
        index = _json(
            {
                "schemaVersion": 2,
                "mediaType": "application/vnd.oci.image.index.v1+json",
                "manifests": [
                    {
                        "mediaType": "application/vnd.oci.image.manifest.v1+json",
                        "digest": manifest_digest,
                        "size": len(manifest),
                        "platform": {"architecture": "amd64", "os": "linux"},
                        "annotations": {
                            "io.containerd.image.name": ref,
                            "org.opencontainers.image.ref.name": ref.rsplit(":", 1)[-1],
                        },
                    }
                ],
            }
        )
        info = tarfile.TarInfo("index.json")
        info.size, info.mtime, info.mode = len(index), EPOCH, 0o644
        tar.addfile(info, io.BytesIO(index))
    tmp.replace(out)
    return manifest_digest


def _pairs(values: list[str]) -> dict[str, str]:
    return dict(v.split("=", 1) for v in values)


def main() -> None:
    """Parse the flags and write one archive, or relabel one (``--relabel FILE --label K=V ...``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--relabel", type=Path, default=None, help="set --label values in this archive")
    parser.add_argument("--rootfs", type=Path)
    parser.add_argument("--ref", help="full reference, e.g. docker.io/library/ubuntu:22.04")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--entrypoint", type=json.loads, default=None)
    parser.add_argument("--cmd", type=json.loads, default=None)
    parser.add_argument("--env", action="append", default=[])
    parser.add_argument("--user", default="")
    parser.add_argument("--workdir", default="")
    parser.add_argument("--label", action="append", default=[])
    args = parser.parse_args()
    if args.relabel is not None:
        print(f"{relabel(args.relabel, _pairs(args.label))} {args.relabel}")
        return
    if args.rootfs is None or args.ref is None or args.out is None:
        parser.error("--rootfs, --ref and --out are required (unless --relabel)")
    config: dict[str, Any] = {"Env": args.env or [DEFAULT_PATH]}
    if args.entrypoint is not None:
        config["Entrypoint"] = args.entrypoint
    if args.cmd is not None:
        config["Cmd"] = args.cmd
    if args.user:
        config["User"] = args.user
    if args.workdir:
        config["WorkingDir"] = args.workdir
    digest = write_archive(args.rootfs, args.ref, args.out, config, _pairs(args.label))
    print(f"{args.ref} {digest} {args.out}")


if __name__ == "__main__":
    main()
