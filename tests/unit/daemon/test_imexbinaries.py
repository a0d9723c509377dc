"""Where the daemon finds nvidia-imex and nvidia-imex-ctl: /usr/bin (the CDI mount) first, then PATH."""

from pathlib import Path

import pytest

from imexdra.common.errors import ConfigError
from imexdra.daemon import imexbinaries
from imexdra.daemon.imexbinaries import find_imex_binaries, locate

NAMES = ("nvidia-imex", "nvidia-imex-ctl")


def programs(directory: Path, *, mode: int = 0o755) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name in NAMES:
        (directory / name).write_text("#!/bin/sh\n")
        (directory / name).chmod(mode)
    return directory


@pytest.fixture
def usr_bin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in for the container's /usr/bin, where the base CDI spec mounts the driver's programs."""
    directory = tmp_path / "usr-bin"
    directory.mkdir()
    monkeypatch.setattr(imexbinaries, "DRIVER_BINARY_DIR", str(directory))
    return directory


def test_the_cdi_mounted_programs_win_over_path(tmp_path: Path, usr_bin: Path) -> None:
    """Programs of the same names earlier on PATH cannot stand in for the driver's."""
    programs(usr_bin)
    shadow = programs(tmp_path / "venv-bin")
    found = find_imex_binaries(str(shadow))
    assert (found.imex, found.ctl) == (str(usr_bin / "nvidia-imex"), str(usr_bin / "nvidia-imex-ctl"))


def test_path_is_searched_after_usr_bin(tmp_path: Path, usr_bin: Path) -> None:
    """As upstream's daemon, which runs the programs by name from PATH."""
    elsewhere = programs(tmp_path / "opt-bin")
    found = find_imex_binaries(f"{tmp_path / 'empty'}:{elsewhere}")
    assert found.imex == str(elsewhere / "nvidia-imex")
    assert locate("nvidia-imex-ctl", str(elsewhere)) == str(elsewhere / "nvidia-imex-ctl")


@pytest.mark.parametrize(
    ("present", "missing"),
    [((), "nvidia-imex and nvidia-imex-ctl"), (("nvidia-imex",), "nvidia-imex-ctl")],
    ids=["both-missing", "ctl-missing"],
)
def test_missing_programs_name_the_driver_root(
    tmp_path: Path, usr_bin: Path, present: tuple[str, ...], missing: str
) -> None:
    """The error says what is missing, where it looked, and that the driver install must provide it."""
    for name in present:
        (usr_bin / name).write_text("#!/bin/sh\n")
        (usr_bin / name).chmod(0o755)
    with pytest.raises(ConfigError) as raised:
        find_imex_binaries(str(tmp_path))
    message = str(raised.value)
    assert message.startswith(f"{missing} not found in this container (searched {usr_bin}:{tmp_path})")
    assert "NVIDIA driver install must provide them" in message and "nvidiaDriverRoot" in message


def test_a_file_that_is_not_executable_does_not_count(usr_bin: Path, tmp_path: Path) -> None:
    """A non-executable file named nvidia-imex is not the program."""
    programs(usr_bin, mode=0o644)
    with pytest.raises(ConfigError, match="nvidia-imex and nvidia-imex-ctl not found"):
        find_imex_binaries(str(tmp_path))
