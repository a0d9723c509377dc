"""Install a foreign architecture's Debian packages into a root filesystem without running any of them.

tools/image/build.sh builds the arm64 image's root on an amd64 machine without an emulator.
``debootstrap --foreign`` lays the root out and downloads the suite's packages of that architecture,
but its second stage (dpkg unpacking and configuring every package) runs the packages' maintainer
scripts, which needs the target's CPU. This module does that stage's work from the build machine:

* unpacking needs no CPU of the target: each package's files are extracted with ``dpkg-deb`` and tar
  (``--keep-directory-symlink``, as debootstrap does, so the merged /usr stays merged);
* what configuring adds to the packages' files is, for the image's package set, the same on every
  architecture: users and groups, alternatives, the CA bundle, PAM, debconf and shell lists. It is
  copied from a *configured* root of the same packages at the same versions, the build machine's own
  debootstrap base: every file there that no package owns is that state, except what names the build
  machine's architecture (the loader's cache, /usr/lib64), which is left out, and bytecode, which the
  build compiles afterwards. A copied file that is an ELF binary or names ``x86_64-linux-gnu`` stops
  the build: the state would then not be architecture-free;
* dpkg's database is written as dpkg leaves it after configuring: ``status`` (each package's control
  fields, its Status and Conffiles) and ``info/`` (file lists, md5sums, maintainer scripts), so dpkg,
  apt and image scanners see every package installed, at its version, for the target architecture.

The packages must be the configured root's, name for name and version for version; otherwise this
stops, naming the difference (docs/image.md, "The arm64 root").

Usage: python3 debroot.py --root DIR --debs DIR --configured DIR --arch ARCH
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

EXCLUDED = (
    "dev",
    "proc",
    "sys",
    "debootstrap",
    "etc/ld.so.cache",
    "usr/lib64",
    "var/cache/apt/archives",
    "var/cache/ldconfig",
    "var/lib/apt/lists",
    "var/lib/dpkg/info",
    "var/lib/dpkg/status",
    "var/lib/dpkg/status-old",
    "var/lib/dpkg/available",
    "var/log",
)
"""Unowned paths of the configured root that are not copied: runtime mounts, the build machine's
loader cache and directory, its .debs and package index, the dpkg database (written here for the
target) and logs. Top-level symbolic links (the merged /usr: bin -> usr/bin, lib64 -> usr/lib64) are
not copied either: debootstrap made the target's own."""
FOREIGN_MARKERS = (b"\x7fELF", b"x86_64", b"x86-64", b"amd64")
"""Bytes that no architecture-free file of configuration state contains."""
FIELD_ORDER = [
    "Package",
    "Essential",
    "Protected",
    "Status",
    "Priority",
    "Section",
    "Installed-Size",
    "Origin",
    "Maintainer",
    "Bugs",
    "Architecture",
    "Multi-Arch",
    "Source",
    "Version",
    "Config-Version",
    "Replaces",
    "Provides",
    "Depends",
    "Pre-Depends",
    "Recommends",
    "Suggests",
    "Breaks",
    "Conflicts",
    "Enhances",
    "Conffiles",
    "Description",
]
"""The order dpkg writes a status entry's fields in; others follow in their control file's order."""
INFO_MEMBERS = (
    "conffiles",
    "config",
    "postinst",
    "postrm",
    "preinst",
    "prerm",
    "shlibs",
    "symbols",
    "templates",
    "triggers",
    "md5sums",
)
"""Control members dpkg keeps in info/ as <package>.<member>."""


@dataclass
class Package:
    """One .deb of the target architecture: control fields, control members and file list."""

    deb: Path
    fields: list[tuple[str, str]]
    members: dict[str, tuple[bytes, int]]
    files: list[str]

    def field(self, name: str) -> str:
        """A control field's value, '' when absent."""
        return next((value for key, value in self.fields if key == name), "")


def parse_stanzas(text: str) -> list[list[tuple[str, str]]]:
    """Debian control-file paragraphs as ordered (field, value) lists; continuation lines kept."""
    stanzas: list[list[tuple[str, str]]] = []
    current: list[tuple[str, str]] = []
    for line in text.splitlines():
        if not line.strip():
            if current:
                stanzas.append(current)
            current = []
        elif line[0] in " \t" and current:
            key, value = current[-1]
            current[-1] = (key, f"{value}\n{line}")
        else:
            key, _, value = line.partition(":")
            current.append((key, value.strip()))
    if current:
        stanzas.append(current)
    return stanzas


def read_deb(deb: Path, root: Path) -> Package:
    """Unpack ``deb`` into ``root`` and read its control data and file list."""
    with tempfile.TemporaryDirectory() as scratch:
        data = Path(scratch) / "data.tar"
        with data.open("wb") as out:
            subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=out, check=True)
        subprocess.run(
            ["tar", "-x", "--keep-directory-symlink", "--same-owner", "-p", "-f", str(data), "-C", str(root)],
            check=True,
        )
        with tarfile.open(data) as tar:
            names = [member.name for member in tar.getmembers()]
    control = subprocess.run(["dpkg-deb", "--ctrl-tarfile", str(deb)], capture_output=True, check=True).stdout
    members: dict[str, tuple[bytes, int]] = {}
    with tarfile.open(fileobj=io.BytesIO(control)) as tar:
        for member in tar.getmembers():
            name = member.name.removeprefix("./")
            extracted = tar.extractfile(member) if member.isfile() else None
            if extracted is not None:
                members[name] = (extracted.read(), member.mode)
    (fields,) = parse_stanzas(members.pop("control")[0].decode())
    return Package(deb, fields, members, [_list_entry(name) for name in names])


def _list_entry(name: str) -> str:
    """A data.tar member as dpkg's file list writes it: ``./usr/`` is ``/usr``, ``./`` is ``/.``."""
    path = "/" + name.removeprefix("./").rstrip("/")
    return "/." if path == "/" else path


def owned_paths(configured: Path) -> set[str]:
    """Every path some package of the configured root owns (its info/*.list), /usr merged."""
    merged = {
        entry.name: entry.readlink().as_posix() for entry in configured.iterdir() if entry.is_symlink()
    }  # bin -> usr/bin, lib -> usr/lib, ...
    owned: set[str] = set()
    for listing in (configured / "var/lib/dpkg/info").glob("*.list"):
        for line in listing.read_text().splitlines():
            path = line.lstrip("/")
            top, _, rest = path.partition("/")
            if top in merged and not merged[top].startswith("/"):
                path = f"{merged[top]}/{rest}" if rest else merged[top]
            owned.add(path)
    return owned


def configured_state(configured: Path) -> list[str]:
    """Paths of the configured root (relative, parents first) that no package owns: configuring made them."""
    owned = owned_paths(configured)
    state = []
    for directory, subdirs, files in os.walk(configured):
        relative = Path(directory).relative_to(configured).as_posix()
        relative = "" if relative == "." else relative + "/"
        subdirs[:] = sorted(d for d in subdirs if not _excluded(relative + d))
        for name in [*subdirs, *sorted(files)]:
            path = relative + name
            if not relative and (configured / name).is_symlink():
                continue
            if path not in owned and not _excluded(path) and name != "__pycache__":
                state.append(path)
    return state


def _excluded(path: str) -> bool:
    return (
        path == "__pycache__"
        or path.endswith("/__pycache__")
        or any(path == prefix or path.startswith(prefix + "/") for prefix in EXCLUDED)
    )


def copy_state(configured: Path, root: Path, paths: list[str], *, from_arch: str, to_arch: str) -> None:
    """Copy the configuration state into ``root``, owners and modes kept; refuse foreign files.

    debconf's database is the one file that names the architecture: the owners of a question
    (``Owners: libc6, libc6:amd64``) carry it, as dpkg names Multi-Arch: same packages.
    """
    for path in paths:
        source, target = configured / path, root / path
        if source.is_symlink() or source.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.is_symlink() or target.exists():
                target.unlink()
            shutil.copy2(source, target, follow_symlinks=False)
            if not source.is_symlink():
                data = source.read_bytes()
                if path.startswith("var/cache/debconf/"):
                    data = re.sub(
                        rb"(?m)^Owners: .*$",
                        lambda m: m.group(0).replace(f":{from_arch}".encode(), f":{to_arch}".encode()),
                        data,
                    )
                    target.write_bytes(data)
                marker = next((m for m in FOREIGN_MARKERS if m in data), None)
                if marker is not None:
                    raise SystemExit(f"debroot: {path} of {configured} is not architecture-free ({marker!r})")
            os.lchown(target, source.lstat().st_uid, source.lstat().st_gid)
        elif source.is_dir():
            target.mkdir(parents=True, exist_ok=True)
            shutil.copystat(source, target)
            os.chown(target, source.stat().st_uid, source.stat().st_gid)


def write_database(configured: Path, root: Path, packages: dict[str, Package]) -> None:
    """Write ``status`` and ``info/`` for ``packages`` as dpkg leaves them after configuring them."""
    dpkg = root / "var/lib/dpkg"
    info = dpkg / "info"
    info.mkdir(parents=True, exist_ok=True)
    entries = []
    for stanza in parse_stanzas((configured / "var/lib/dpkg/status").read_text()):
        installed = dict(stanza)
        package = packages[installed["Package"]]
        entries.append(_status_entry(package, installed["Status"], root))
        # Multi-Arch: same packages' info files carry the architecture (libc6:arm64.list), as dpkg names them.
        name = package.field("Package")
        if package.field("Multi-Arch") == "same":
            name += f":{package.field('Architecture')}"
        (info / f"{name}.list").write_text("".join(f"{path}\n" for path in package.files))
        for member in INFO_MEMBERS:
            if member in package.members:
                data, mode = package.members[member]
                (info / f"{name}.{member}").write_bytes(data)
                (info / f"{name}.{member}").chmod(mode & 0o777)
    format_file = configured / "var/lib/dpkg/info/format"
    if format_file.exists():
        shutil.copy2(format_file, info / "format")
    (dpkg / "status").write_text("".join(f"{entry}\n" for entry in entries))
    (dpkg / "available").touch()


def _status_entry(package: Package, status: str, root: Path) -> str:
    """A status entry: the target's control fields in dpkg's order, Status, Conffiles from ``root``."""
    fields = {key: value for key, value in package.fields}
    fields["Status"] = status
    conffiles = package.members.get("conffiles", (b"", 0))[0].decode().split()
    if conffiles:
        lines = []
        for conffile in conffiles:
            path = root / conffile.lstrip("/")
            digest = (
                hashlib.md5(path.read_bytes(), usedforsecurity=False).hexdigest()
                if path.is_file()
                else "newconffile"
            )
            lines.append(f"\n {conffile} {digest}")
        fields["Conffiles"] = "".join(lines)
    order = [key for key in FIELD_ORDER if key in fields] + [
        key for key, _ in package.fields if key not in FIELD_ORDER
    ]
    return "".join(f"{key}: {fields[key]}\n".replace(": \n", ":\n", 1) for key in order)


def main() -> int:
    """Unpack every .deb, copy the configuration state, write the database; check the package sets."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, required=True, help="the foreign root (debootstrap --foreign)")
    parser.add_argument("--debs", type=Path, required=True, help="its .debs")
    parser.add_argument(
        "--configured", type=Path, required=True, help="a configured root of the same packages"
    )
    parser.add_argument("--arch", required=True, help="the root's Debian architecture, e.g. arm64")
    args = parser.parse_args()
    installed = parse_stanzas((args.configured / "var/lib/dpkg/status").read_text())
    wanted = {dict(stanza)["Package"]: dict(stanza)["Version"] for stanza in installed}
    packages = {}
    for deb in sorted(args.debs.glob("*.deb")):
        package = read_deb(deb, args.root)
        if package.field("Architecture") not in (args.arch, "all"):
            raise SystemExit(f"debroot: {deb.name} is {package.field('Architecture')}, not {args.arch}")
        packages[package.field("Package")] = package
    found = {name: package.field("Version") for name, package in packages.items()}
    if found != wanted:
        differ = sorted(
            f"{name}: {wanted.get(name, '-')} there, {found.get(name, '-')} here"
            for name in wanted.keys() | found.keys()
            if wanted.get(name) != found.get(name)
        )
        sys.stderr.write(
            f"debroot: the packages differ from {args.configured}'s:\n  " + "\n  ".join(differ) + "\n"
        )
        return 3
    # debootstrap's first stage makes /proc a link to the host's when it finds itself in a container;
    # its second stage makes it the directory the configured root has, and so does this.
    for mount_point in ("proc", "sys", "dev"):
        target = args.root / mount_point
        if target.is_symlink():
            target.unlink()
            target.mkdir()
            shutil.copystat(args.configured / mount_point, target)
    # The configured root's architecture: that of its packages which are not Architecture: all.
    from_arch = next(arch for s in installed if (arch := dict(s)["Architecture"]) != "all")
    state = configured_state(args.configured)
    copy_state(args.configured, args.root, state, from_arch=from_arch, to_arch=args.arch)
    write_database(args.configured, args.root, packages)
    return 0


if __name__ == "__main__":
    sys.exit(main())
