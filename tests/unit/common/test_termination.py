"""The termination message: written only where the kubelet mounted the file, at most 4 KiB."""

from __future__ import annotations

from pathlib import Path

from imexdra.common.process.termination import LIMIT, write_termination_message


def test_message_goes_only_into_the_file_the_kubelet_mounted(tmp_path: Path) -> None:
    """Outside a container (no file) nothing is created; inside, the message replaces what was there."""
    log = tmp_path / "termination-log"
    write_termination_message("no nvidia-imex", log)
    assert not log.exists()
    log.write_text("an older message")
    write_termination_message("no nvidia-imex", log)
    assert log.read_text() == "no nvidia-imex"


def test_message_is_cut_to_what_the_kubelet_keeps(tmp_path: Path) -> None:
    """The kubelet keeps 4 KiB: the start of a long message survives, not an arbitrary tail."""
    log = tmp_path / "termination-log"
    log.touch()
    write_termination_message("x" * 5000, log)
    assert log.read_text() == "x" * LIMIT
