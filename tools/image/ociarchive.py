"""Write a one-layer OCI image archive (an image layout in a tar) from root filesystem directories.

The local cluster's nodes run containerd, which cannot pull here (no registry is reachable), so
tools/image/build.sh assembles each image's root filesystem from Debian packages and our own builds and
this module packs it the way `docker save` / `buildah push oci-archive:` would: one uncompressed layer,
an image config, a manifest and an index whose entry carries the full reference name
(``io.containerd.image.name``), which `ctr images import` tags the image with. Why not umoci or
buildah: either needs a bundle or a storage driver of its own; this is ~200 lines of the OCI image
spec with no dependency, and byte-for-byte reproducible (sorted entries, fixed mtimes), so the build
cache can compare digests (docs/node-runtime.md).

Given one root filesystem per platform (``--rootfs DIR --platform linux/arm64``, repeated), the
archive holds one image for all of them, as `docker buildx build --platform ... --output type=oci`
writes it: index.json names an image index, which lists one manifest per platform; a runtime picks
its own (docs/image.md). Each platform's manifest is byte for byte the one a single-platform archive
of that root holds: adding a platform changes no other platform's image.

Usage: python3 ociarchive.py --rootfs DIR [--platform OS/ARCH] [--rootfs DIR --platform OS/ARCH ...]
       --ref NAME:TAG --out FILE.tar [--entrypoint JSON] [--cmd JSON] [--env K=V ...] [--user U]
       [--workdir D] [--label K=V ...]
       python3 ociarchive.py --relabel FILE.tar --label K=V ...   (the layers stay; see ``relabel``)
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, NamedTuple

DEFAULT_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DEFAULT_PLATFORM = "linux/amd64"
EPOCH = 0
"""Every mtime in a layer: the same rootfs gives the same digest on every machine."""
INDEX = "application/vnd.oci.image.index.v1+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"


class Image(NamedTuple):
    """One platform's image, ready to pack: its config and its one layer."""

    platform: str
    config: bytes
    layer_digest: str
    layer_size: int
    layer: IO[bytes]


def _platform(platform: str) -> dict[str, str]:
    """``linux/arm64`` as an OCI platform object (arm64's default variant v8 left out, as containerd does)."""
    os_name, _, architecture = platform.partition("/")
    if not os_name or not architecture or "/" in architecture:
        raise ValueError(f"a platform is OS/ARCH (linux/arm64), not {platform!r}")
    return {"architecture": architecture, "os": os_name}


@contextmanager
def _layer(rootfs: Path) -> Iterator[tuple[IO[bytes], str, int]]:
    """The rootfs as an uncompressed tar in a temporary file; yields the file (at 0), digest and size.

    Entries are sorted, owners and modes kept, mtimes fixed.
    """
    with tempfile.TemporaryFile() as file:
        with tarfile.open(fileobj=file, mode="w", format=tarfile.PAX_FORMAT) as tar:
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
        size = file.tell()
        file.seek(0)
        digest = hashlib.sha256()
        while chunk := file.read(1 << 20):
            digest.update(chunk)
        file.seek(0)
        yield file, f"sha256:{digest.hexdigest()}", size


def _blob(tar: tarfile.TarFile, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    _add(tar, f"blobs/sha256/{digest}", io.BytesIO(data), len(data))
    return f"sha256:{digest}"


def _add(tar: tarfile.TarFile, name: str, data: IO[bytes], size: int) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = size, EPOCH, 0o644
    tar.addfile(info, data)


def _json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def write_archive(
    roots: dict[str, Path], ref: str, out: Path, config: dict[str, Any], labels: dict[str, str]
) -> str:
    """Write the archive of ``roots`` (platform -> rootfs); return the digest index.json names."""

    def images() -> Iterator[Image]:
        for platform, rootfs in roots.items():
            with _layer(rootfs) as (layer, digest, size):
                image_config: dict[str, Any] = {
                    **_platform(platform),
                    "created": "1970-01-01T00:00:00Z",
                    "config": {**config, "Labels": labels},
                    "rootfs": {"type": "layers", "diff_ids": [digest]},
                    "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "tools/image/build.sh"}],
                }
                yield Image(platform, _json(image_config), digest, size, layer)

    return _pack(out, ref, images())


def relabel(archive: Path, labels: dict[str, str]) -> str:
    """Set ``labels`` in every image config of ``archive``, in place; return the new top digest.

    The layers are copied as they are, so this takes a second where rebuilding the project's image
    takes half a minute; the result is byte for byte what ``write_archive`` writes with those labels.
    """
    with tarfile.open(archive) as old:
        index = json.loads(_member(old, "index.json"))
        [entry] = index["manifests"]
        ref = entry["annotations"]["io.containerd.image.name"]
        if entry["mediaType"] == INDEX:
            entries = json.loads(_member(old, _blob_name(entry["digest"])))["manifests"]
        else:
            entries = [entry]

        def images() -> Iterator[Image]:
            for manifest_entry in entries:
                manifest = json.loads(_member(old, _blob_name(manifest_entry["digest"])))
                image_config = json.loads(_member(old, _blob_name(manifest["config"]["digest"])))
                image_config["config"]["Labels"] = {**image_config["config"].get("Labels", {}), **labels}
                [layer] = manifest["layers"]
                layer_file = old.extractfile(_blob_name(layer["digest"]))
                assert layer_file is not None
                platform = f"{image_config['os']}/{image_config['architecture']}"
                yield Image(platform, _json(image_config), layer["digest"], layer["size"], layer_file)

        return _pack(archive, ref, images())


def _member(tar: tarfile.TarFile, name: str) -> bytes:
    member = tar.extractfile(name)
    if member is None:
        raise ValueError(f"{name} is not a file in {tar.name!r}")
    return member.read()


def _blob_name(digest: str) -> str:
    return "blobs/" + digest.replace(":", "/", 1)


def _pack(out: Path, ref: str, images: Iterator[Image]) -> str:
    """Write the layout to ``out`` atomically; return the digest index.json names.

    Per image its config, layer and manifest (in this order), then, for more than one image, the
    image index, then index.json.
    """
    tmp = out.with_suffix(".tmp")
    annotations = {
        "io.containerd.image.name": ref,
        "org.opencontainers.image.ref.name": ref.rsplit(":", 1)[-1],
    }
    with tarfile.open(tmp, mode="w", format=tarfile.PAX_FORMAT) as tar:
        layout = _json({"imageLayoutVersion": "1.0.0"})
        _add(tar, "oci-layout", io.BytesIO(layout), len(layout))
        descriptors = []
        for image in images:
            config_digest = _blob(tar, image.config)
            _add(tar, _blob_name(image.layer_digest), image.layer, image.layer_size)
            manifest = _json(
                {
                    "schemaVersion": 2,
                    "mediaType": MANIFEST,
                    "config": {
                        "mediaType": "application/vnd.oci.image.config.v1+json",
                        "digest": config_digest,
                        "size": len(image.config),
                    },
                    "layers": [
                        {
                            "mediaType": "application/vnd.oci.image.layer.v1.tar",
                            "digest": image.layer_digest,
                            "size": image.layer_size,
                        }
                    ],
                }
            )
            descriptors.append(
                {
                    "mediaType": MANIFEST,
                    "digest": _blob(tar, manifest),
                    "size": len(manifest),
                    "platform": _platform(image.platform),
                }
            )
        if len(descriptors) == 1:
            [top] = descriptors
        else:
            image_index = _json({"schemaVersion": 2, "mediaType": INDEX, "manifests": descriptors})
            top = {"mediaType": INDEX, "digest": _blob(tar, image_index), "size": len(image_index)}
        index = _json(
            {"schemaVersion": 2, "mediaType": INDEX, "manifests": [{**top, "annotations": annotations}]}
        )
        _add(tar, "index.json", io.BytesIO(index), len(index))
    tmp.replace(out)
    return str(top["digest"])


def _pairs(values: list[str]) -> dict[str, str]:
    return dict(v.split("=", 1) for v in values)


def main() -> None:
    """Parse the flags and write one archive, or relabel one (``--relabel FILE --label K=V ...``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--relabel", type=Path, default=None, help="set --label values in this archive")
    parser.add_argument("--rootfs", type=Path, action="append", default=[], help="a root filesystem")
    parser.add_argument("--platform", action="append", default=[], help=f"its platform ({DEFAULT_PLATFORM})")
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
    if not args.rootfs or args.ref is None or args.out is None:
        parser.error("--rootfs, --ref and --out are required (unless --relabel)")
    platforms = args.platform or [DEFAULT_PLATFORM]
    if len(platforms) != len(args.rootfs) or len(set(platforms)) != len(platforms):
        parser.error("give each --rootfs its own --platform (or one --rootfs and none)")
    config: dict[str, Any] = {"Env": args.env or [DEFAULT_PATH]}
    if args.entrypoint is not None:
        config["Entrypoint"] = args.entrypoint
    if args.cmd is not None:
        config["Cmd"] = args.cmd
    if args.user:
        config["User"] = args.user
    if args.workdir:
        config["WorkingDir"] = args.workdir
    roots = dict(zip(platforms, args.rootfs, strict=True))
    digest = write_archive(roots, args.ref, args.out, config, _pairs(args.label))
    print(f"{args.ref} {digest} {args.out}")


if __name__ == "__main__":
    main()
