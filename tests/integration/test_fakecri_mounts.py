"""fakecri's container mount setup, run for real: file mount points never land on the host.

fakecri starts every host-process container (and each exec probe) through its own binary in helper mode,
in a fresh private mount namespace, with the container's mounts as JSON; these tests run that helper
exactly so, inside ``unshare --mount`` (as fakecri itself runs in a node's private namespace), over
directories of their own. Checked: a file mounted where the host has no file (a CDI mount of
``/usr/bin/nvidia-imex``) is visible in the container, with the CDI options ``ro``/``nosuid``/``nodev``,
while the host's directory stays as it was; mounts below an overlaid directory (``/dev/shm`` under
``/dev``) remain; a CDI mount whose source is missing fails the start, as runc fails it; a CDI device
node is made with mknod in the container, its missing directory too, and nothing on the host.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

from imexdra_sim.localcluster.binaries import locate


@pytest.fixture(scope="module")
def fakecri() -> Path:
    return locate().path("fakecri")


def run_container(
    fakecri: Path,
    mounts: list[dict[str, Any]],
    script: str,
    setup: str = "true",
    devices: list[dict[str, Any]] | None = None,
) -> str:
    """Run ``script`` as fakecri runs a container with ``mounts`` and device nodes ``devices``;
    ``setup`` runs first, in the namespace."""
    spec = {
        "mounts": mounts,
        "devices": devices or [],
        "argv": ["sh", "-c", script],
        "env": ["PATH=/usr/bin:/bin"],
        "dir": "/",
    }
    wrapper = f'{setup} && exec "$0" __mount-helper "$1"'
    done = subprocess.run(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            wrapper,
            str(fakecri),
            json.dumps(spec),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def program(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('#!/bin/sh\necho "driver program $*"\n')
    path.chmod(0o755)
    return path


def mount_options(mountinfo: str, target: Path) -> set[str]:
    (line,) = [line for line in mountinfo.splitlines() if line.split()[4] == str(target)]
    return set(line.split()[5].split(","))


def test_a_file_mount_point_missing_on_the_host_exists_in_the_container_only(
    fakecri: Path, tmp_path: Path
) -> None:
    """The mount point is made in a per-container overlay: the container runs the file, the host has none."""
    source = program(tmp_path / "driver-root/usr/bin/nvidia-imex")
    usr_bin = tmp_path / "usr-bin"
    usr_bin.mkdir()
    (usr_bin / "host-tool").write_text("host\n")
    target = usr_bin / "nvidia-imex"
    cdi_mount = {
        "source": str(source),
        "target": str(target),
        "readOnly": True,
        "noSuid": True,
        "noDev": True,
        "mustExist": True,
    }
    q = shlex.quote
    script = (
        f"{q(str(target))} -c cfg; cat {q(str(usr_bin / 'host-tool'))}; "
        f"echo scratch > {q(str(usr_bin / 'written-inside'))}; echo ---; cat /proc/self/mountinfo"
    )
    output, mountinfo = run_container(fakecri, [cdi_mount], script).split("---\n")
    assert output == "driver program -c cfg\nhost\n"
    assert {"ro", "nosuid", "nodev"} <= mount_options(mountinfo, target)
    assert sorted(p.name for p in usr_bin.iterdir()) == ["host-tool"]  # nothing created on the host


def test_mounts_below_an_overlaid_directory_stay(fakecri: Path, tmp_path: Path) -> None:
    """A submount of the directory (like /dev/shm in /dev) is bound again above the overlay."""
    source = program(tmp_path / "source")
    dev = tmp_path / "dev"
    (dev / "shm").mkdir(parents=True)
    shm = shlex.quote(str(dev / "shm"))
    setup = f"mount -t tmpfs shm {shm} && echo shared > {shm}/f"
    script = f"cat {shlex.quote(str(dev / 'shm/f'))}; {shlex.quote(str(dev / 'probe'))}"
    mounts = [{"source": str(source), "target": str(dev / "probe"), "readOnly": True}]
    assert run_container(fakecri, mounts, script, setup) == "shared\ndriver program \n"
    assert sorted(p.name for p in dev.iterdir()) == ["shm"]


def test_a_cdi_mount_of_a_missing_file_fails_the_start(fakecri: Path, tmp_path: Path) -> None:
    """As runc: a CDI mount's source must exist; nothing is created for it, the container does not start."""
    spec = {
        "mounts": [{"source": str(tmp_path / "absent"), "target": str(tmp_path / "t"), "mustExist": True}],
        "argv": ["true"],
        "env": ["PATH=/usr/bin:/bin"],
    }
    done = subprocess.run(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "--",
            str(fakecri),
            "__mount-helper",
            json.dumps(spec),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 127
    assert f"mount {tmp_path / 'absent'} at {tmp_path / 't'}: stat" in done.stderr
    assert not (tmp_path / "absent").exists() and not (tmp_path / "t").exists()


def test_a_cdi_device_node_is_made_in_the_container_only(fakecri: Path, tmp_path: Path) -> None:
    """As runc makes a CDI device node: a character device of the given major, minor and mode at its
    path, its missing directory (``nvidia-caps-imex-channels``) made too, all in the container only."""
    dev = tmp_path / "dev"
    dev.mkdir()
    channel = dev / "nvidia-caps-imex-channels" / "channel7"
    device = {"path": str(channel), "block": False, "major": 509, "minor": 7, "mode": 0o666}
    script = f"stat -c '%F %t:%T %a' {shlex.quote(str(channel))}"
    assert run_container(fakecri, [], script, devices=[device]) == "character special file 1fd:7 666\n"
    assert list(dev.iterdir()) == []
