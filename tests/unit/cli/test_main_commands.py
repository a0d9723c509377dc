"""The ``imexdra`` command group: built-in commands, and commands registered by installed distributions."""

from __future__ import annotations

from importlib.metadata import EntryPoint

import click
import pytest
from click.testing import CliRunner

from imexdra.cli import main as cli_main


def _listed(output: str) -> list[str]:
    """The command names in a --help output's Commands section."""
    section = output.partition("Commands:")[2]
    return [line.split()[0] for line in section.splitlines() if line.strip()]


def _registering(monkeypatch: pytest.MonkeyPatch, *points: EntryPoint) -> None:
    """Make the CLI see exactly ``points`` in its entry-point group."""

    def entry_points(*, group: str) -> tuple[EntryPoint, ...]:
        assert group == cli_main.COMMAND_GROUP
        return points

    monkeypatch.setattr(cli_main, "entry_points", entry_points)


def test_demo_comes_from_the_installed_simulator() -> None:
    """In the dev venv imexdra-sim registers ``demo``: listed in --help and its own help answers."""
    runner = CliRunner()
    listing = runner.invoke(cli_main.main, ["--help"])
    assert listing.exit_code == 0, listing.output
    assert "demo" in _listed(listing.output)
    demo_help = runner.invoke(cli_main.main, ["demo", "--help"])
    assert demo_help.exit_code == 0, demo_help.output
    assert "--host-managed" in demo_help.output


def test_without_the_simulator_there_is_no_demo(monkeypatch: pytest.MonkeyPatch) -> None:
    """With nothing registered (the image) ``demo`` is an unknown command and ``status`` is still there."""
    _registering(monkeypatch)
    runner = CliRunner()
    listing = runner.invoke(cli_main.main, ["--help"])
    assert _listed(listing.output) == ["diagnose", "status"]
    result = runner.invoke(cli_main.main, ["demo"])
    assert result.exit_code == 2
    assert "No such command 'demo'" in result.output


def test_a_registered_name_never_replaces_a_built_in(monkeypatch: pytest.MonkeyPatch) -> None:
    """An entry point named ``status`` is ignored: the driver's own ``status`` answers."""
    _registering(monkeypatch, EntryPoint("status", "imexdra_sim.cli:demo", cli_main.COMMAND_GROUP))
    result = CliRunner().invoke(cli_main.main, ["status", "--help"])
    assert result.exit_code == 0, result.output
    assert "read-only" in result.output


def test_a_registered_object_that_is_not_a_command_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """An entry point naming something other than a click command fails with a message naming it."""
    _registering(monkeypatch, EntryPoint("odd", "imexdra.cli.main:COMMAND_GROUP", cli_main.COMMAND_GROUP))
    result = CliRunner().invoke(cli_main.main, ["odd"])
    assert result.exit_code == 1
    assert "imexdra.cli.main:COMMAND_GROUP (entry point 'odd') is not a click command" in result.output
    assert isinstance(cli_main.main, click.Group)
