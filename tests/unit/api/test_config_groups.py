"""The option-group mechanism and its value types.

Aspects covered: flags winning over env; builder errors without a matching option; Go durations;
comma-separated lists.
"""

from datetime import timedelta
from pathlib import Path

import click
import pytest

from imexdra.api.flags.common import (
    kube_client_options,
    logging_options,
    node_name_options,
)
from imexdra.api.flags.groups import CommaSeparated, GoDuration, OptionGroup, option
from imexdra.common.errors import ConfigError
from tests.unit.api.cli import invoke


def test_flags_win_over_env(tmp_path: Path) -> None:
    """A flag given on the command line overrides its environment variable."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("")
    result, seen = invoke(
        [logging_options, kube_client_options, node_name_options],
        ["-v", "2", "--kubeconfig", str(kubeconfig), "--node-name", "from-flag"],
        {"LOG_VERBOSITY": "6", "KUBECONFIG": "/nonexistent", "NODE_NAME": "from-env"},
    )
    assert result.exit_code == 0, result.output
    assert (seen["logging"].verbosity, seen["kube_client"].kubeconfig, seen["node_name"]) == (
        2,
        kubeconfig,
        "from-flag",
    )


def test_builder_error_without_matching_option_is_a_usage_error() -> None:
    """A ConfigError that names no option of the group still stops the command with a usage error."""

    def build(value: str) -> str:
        raise ConfigError("combination not allowed")

    result, _ = invoke([OptionGroup("custom", build, option("--value", default="x"))])
    assert result.exit_code == 2
    assert "combination not allowed" in result.output


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", timedelta(0)),
        ("15s", timedelta(seconds=15)),
        ("1m30s", timedelta(seconds=90)),
        ("1h", timedelta(hours=1)),
        ("1.5h", timedelta(minutes=90)),
        (".5s", timedelta(milliseconds=500)),
        ("500ms", timedelta(milliseconds=500)),
        ("100us", timedelta(microseconds=100)),
        ("100µs", timedelta(microseconds=100)),
        ("2000ns", timedelta(microseconds=2)),
        ("+2s", timedelta(seconds=2)),
        ("-2s", timedelta(seconds=-2)),
    ],
    ids=[
        "zero",
        "seconds",
        "composite",
        "hours",
        "fraction",
        "leading-dot",
        "ms",
        "us",
        "micro-sign",
        "ns",
        "plus",
        "minus",
    ],
)
def test_go_duration_accepts(text: str, expected: timedelta) -> None:
    """Go's time.ParseDuration syntax is accepted."""
    assert GoDuration().convert(text, None, None) == expected


@pytest.mark.parametrize(
    "text",
    ["", "15", "s", "1x", "1m30", "1 s", "--1s", "1s2"],
    ids=[
        "empty",
        "no-unit",
        "no-number",
        "bad-unit",
        "trailing-number",
        "space",
        "double-sign",
        "trailing-digit",
    ],
)
def test_go_duration_rejects(text: str) -> None:
    """Anything Go would not parse is rejected."""
    with pytest.raises(click.BadParameter, match="is not a duration"):
        GoDuration().convert(text, None, None)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", ()),
        ("a", ("a",)),
        ("a,b", ("a", "b")),
        (" a , b ", ("a", "b")),
        ("a b", ("a", "b")),
        ("a,,b,", ("a", "b")),
    ],
    ids=["empty", "one", "two", "padded", "spaces", "empty-items"],
)
def test_comma_separated(text: str, expected: tuple[str, ...]) -> None:
    """Lists split on commas and whitespace, like upstream's CSV flags."""
    assert CommaSeparated().convert(text, None, None) == expected
