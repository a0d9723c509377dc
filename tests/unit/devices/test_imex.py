"""IMEX config and node-list parsing, the exact READY rule, and the in-memory FakeImex."""

from __future__ import annotations

import signal

import pytest

from imexdra.devices.imex import ImexError, QueryResult, config_int, parse_config, parse_node_list
from imexdra_sim.devices.imex_fake import FakeImex


def test_parse_config_skips_comments_and_keeps_empty_values() -> None:
    """KEY=VALUE lines are trimmed, comments and junk lines skipped, later keys win."""
    text = "# comment\nLOG_FILE_NAME=\n SERVER_PORT = 50000 \nnot a setting\nSERVER_PORT=50001\n=x\n"
    assert parse_config(text) == {"LOG_FILE_NAME": "", "SERVER_PORT": "50001"}


@pytest.mark.parametrize(
    ("config", "expected"),
    [({"P": "5"}, 5), ({"P": ""}, 7), ({}, 7)],
    ids=["set", "empty-means-default", "absent-means-default"],
)
def test_config_int(config: dict[str, str], expected: int) -> None:
    """Integer settings fall back to the default when absent or empty."""
    assert config_int(config, "P", 7) == expected


def test_config_int_rejects_garbage() -> None:
    """A non-integer value names the key."""
    with pytest.raises(ValueError, match="P='x'"):
        config_int({"P": "x"}, "P")


def test_parse_node_list() -> None:
    """One entry per non-empty, non-comment line, order kept."""
    assert parse_node_list("10.0.0.2\n\n# x\n compute-domain-daemon-0000 \n") == [
        "10.0.0.2",
        "compute-domain-daemon-0000",
    ]


@pytest.mark.parametrize(
    ("result", "ready"),
    [
        (QueryResult(0, "READY\n"), True),
        (QueryResult(0, "READY"), False),
        (QueryResult(0, "READY\n\n"), False),
        (QueryResult(1, "READY\n"), False),
        (QueryResult(0, "NOT_READY\n"), False),
    ],
    ids=["exact", "no-newline", "extra-newline", "non-zero-exit", "not-ready"],
)
def test_ready_is_byte_exact(result: QueryResult, ready: bool) -> None:
    """Only exit 0 with exactly READY and one newline counts (upstream compares bytes)."""
    assert result.ready is ready


async def test_fake_imex_records_and_exits() -> None:
    """FakeImex hands out PIDs, records signals, ends on exit() or SIGTERM, and refuses a second start."""
    imex = FakeImex()
    pid = await imex.start()
    with pytest.raises(ImexError, match="already running"):
        await imex.start()
    assert (await imex.query()).ready
    imex.signal(signal.SIGUSR1)
    assert [(r.pid, r.signum) for r in imex.signals] == [(pid, signal.SIGUSR1)]
    imex.exit(3)
    assert await imex.wait() == 3
    assert imex.pid is None and not (await imex.query()).ready
    with pytest.raises(ImexError, match="not running"):
        imex.signal(signal.SIGUSR1)
    second = await imex.start()
    assert second != pid
    assert await imex.stop(grace=1) == -signal.SIGTERM


async def test_fake_imex_failing_starts() -> None:
    """``fail_next_starts`` makes that many starts fail before one succeeds."""
    imex = FakeImex()
    imex.fail_next_starts = 2
    for _ in range(2):
        with pytest.raises(ImexError, match="simulated"):
            await imex.start()
    assert await imex.start() > 0
