"""tools/image/debroot.py: a foreign architecture's packages installed into a root without running them.

On a miniature of the real case (a configured amd64 root with a merged /usr, an arm64 .deb of the same
package and version, built here with dpkg-deb): the package's files are unpacked through the merged
/usr, configuration state no package owns is copied but what names the build machine's architecture,
debconf's owners are renamed, dpkg's database lists the arm64 package installed; other versions and
architecture-bound state are refused. tools/image/build.sh runs it on bookworm's real package set.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "tools" / "image" / "debroot.py"


@dataclass
class Case:
    """The configured root, the foreign root and the directory of .debs of one run."""

    configured: Path
    root: Path
    debs: Path

    def run(self) -> subprocess.CompletedProcess[str]:
        """Run debroot.py on them for arm64."""
        argv = [sys.executable, str(SCRIPT), "--root", str(self.root), "--debs", str(self.debs)]
        argv += ["--configured", str(self.configured), "--arch", "arm64"]
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def write(path: Path, text: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)


def make_deb(directory: Path, version: str) -> Path:
    """hello_<version>_arm64.deb: /usr/bin/hello, a conffile and a postinst, Multi-Arch: same."""
    tree = directory / f"hello-{version}"
    write(
        tree / "DEBIAN/control",
        f"Package: hello\nVersion: {version}\nArchitecture: arm64\nMulti-Arch: same\n"
        "Maintainer: Nobody <nobody@example.org>\nDescription: a test package\n more words\n",
    )
    write(tree / "DEBIAN/conffiles", "/etc/hello.conf\n")
    write(tree / "DEBIAN/postinst", "#!/bin/sh\nexit 0\n")
    (tree / "DEBIAN/postinst").chmod(0o755)
    write(tree / "usr/bin/hello", "arm64 hello\n")
    write(tree / "etc/hello.conf", "greeting=hi\n")
    deb = directory / f"hello_{version}_arm64.deb"
    subprocess.run(
        ["dpkg-deb", "--root-owner-group", "--build", str(tree), str(deb)], check=True, capture_output=True
    )
    shutil.rmtree(tree)
    return deb


@pytest.fixture
def case(tmp_path: Path) -> Case:
    """A configured amd64 root holding hello 1.0, an arm64 first-stage root, and hello 1.0 for arm64."""
    configured = tmp_path / "configured"
    (configured / "usr/bin").mkdir(parents=True)
    (configured / "bin").symlink_to("usr/bin")
    (configured / "proc").mkdir()
    write(configured / "usr/bin/hello", "amd64 hello\n")
    write(configured / "etc/hello.conf", "greeting=hi\n")
    write(configured / "etc/passwd", "root:x:0:0:root:/root:/bin/bash\n")
    write(configured / "etc/ld.so.cache", b"ld.so-1.7.0 x86-64 cache")
    write(configured / "usr/lib64/ld-linux-x86-64.so.2", b"\x7fELF")
    write(configured / "var/cache/debconf/config.dat", "Name: hello/q\nOwners: hello, hello:amd64\n")
    write(
        configured / "var/lib/dpkg/status",
        "Package: hello\nStatus: install ok installed\nArchitecture: amd64\nMulti-Arch: same\nVersion: 1.0\n"
        "Conffiles:\n /etc/hello.conf 0\nDescription: a test package\n",
    )
    # dpkg lists the package's paths as it ships them: /bin/hello is /usr/bin/hello in a merged /usr.
    write(configured / "var/lib/dpkg/info/hello:amd64.list", "/.\n/bin\n/bin/hello\n/etc\n/etc/hello.conf\n")
    root = tmp_path / "root"
    (root / "usr").mkdir(parents=True)
    (root / "bin").symlink_to("usr/bin")
    (root / "proc").symlink_to("/proc")
    debs = tmp_path / "debs"
    debs.mkdir()
    make_deb(debs, "1.0")
    return Case(configured, root, debs)


def test_unpacks_configures_and_registers_the_foreign_packages(case: Case) -> None:
    """Files land through the merged /usr, state is copied, dpkg's database names arm64."""
    result = case.run()
    assert result.returncode == 0, result.stderr
    root = case.root
    assert (root / "bin").is_symlink()
    assert (root / "usr/bin/hello").read_text() == "arm64 hello\n"
    assert (root / "etc/passwd").read_text() == "root:x:0:0:root:/root:/bin/bash\n"
    assert (root / "proc").is_dir() and not (root / "proc").is_symlink()
    # The build machine's loader cache and loader directory stay behind.
    assert not (root / "etc/ld.so.cache").exists()
    assert not (root / "usr/lib64").exists()
    assert (
        root / "var/cache/debconf/config.dat"
    ).read_text() == "Name: hello/q\nOwners: hello, hello:arm64\n"
    status = (root / "var/lib/dpkg/status").read_text()
    assert status == (
        "Package: hello\nStatus: install ok installed\nMaintainer: Nobody <nobody@example.org>\n"
        "Architecture: arm64\nMulti-Arch: same\nVersion: 1.0\n"
        "Conffiles:\n /etc/hello.conf 196bdbd60cbe13cc013f592941f52f52\n"
        "Description: a test package\n more words\n\n"
    )
    info = root / "var/lib/dpkg/info"
    assert "/usr/bin/hello" in (info / "hello:arm64.list").read_text().splitlines()
    assert (info / "hello:arm64.postinst").stat().st_mode & 0o777 == 0o755
    assert (info / "hello:arm64.conffiles").read_text() == "/etc/hello.conf\n"


def test_refuses_packages_of_other_versions(case: Case) -> None:
    """A package at another version than the configured root's stops it, naming both versions."""
    (case.debs / "hello_1.0_arm64.deb").unlink()
    make_deb(case.debs, "1.1")
    result = case.run()
    assert result.returncode == 3
    assert "hello: 1.0 there, 1.1 here" in result.stderr


def test_refuses_state_bound_to_the_build_machine(case: Case) -> None:
    """An unowned binary of the configured root is not copied as if it were architecture-free."""
    write(case.configured / "usr/bin/helper", b"\x7fELF\x02\x01\x01")
    result = case.run()
    assert result.returncode != 0
    assert "usr/bin/helper" in result.stderr and "not architecture-free" in result.stderr
