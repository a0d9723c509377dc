"""The CLI's reads retry what the apiserver asks to be retried, as client-go does.

A 429 ("storage is (re)initializing" while the apiserver's watch cache restarts, or throttling) once
failed ``imexdra status`` with exit 3 in CI; reads now retry it up to ``READ_RETRIES`` times after the
server's Retry-After. Other failures (403, 404, a 500 without Retry-After) are not retried.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from imexdra.cli import clusterview
from imexdra.common.kube.client import ApiStatusError
from imexdra.common.kube.models.core_v1 import Pod
from imexdra.common.kube.transport import _status_error


def status_error(code: int, retry_after: str | None = None) -> ApiStatusError:
    """What the transport raises for an answer of ``code``."""
    headers = {"retry-after": retry_after} if retry_after is not None else {}
    return _status_error("list Pod", code, headers, b"storage is (re)initializing")


class FlakyClient:
    """Lists fail with ``failures`` (in order) before answering one pod; counts the attempts."""

    def __init__(self, *failures: ApiStatusError) -> None:
        self.failures = list(failures)
        self.attempts = 0

    async def list(self, resource: Any, **_: Any) -> AsyncIterator[Any]:
        self.attempts += 1
        if self.failures:
            raise self.failures.pop(0)
        yield Pod.from_dict({"metadata": {"name": "p"}})


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Record the waits instead of sleeping them."""
    waits: list[float] = []

    async def record(seconds: float) -> None:
        waits.append(seconds)

    monkeypatch.setattr(clusterview.asyncio, "sleep", record)
    return waits


async def test_429_is_retried_after_the_servers_wait(no_waiting: list[float]) -> None:
    """Two 429s (one naming Retry-After: 2) and then the answer: the list succeeds on attempt 3."""
    client = FlakyClient(status_error(429, "2"), status_error(429))
    pods = await clusterview.list_all(client, Pod)  # type: ignore[arg-type]
    assert [p.metadata.name for p in pods] == ["p"] and client.attempts == 3
    assert no_waiting == [2.0, 1.0]


async def test_retries_are_bounded() -> None:
    """Eleven 429s in a row: the eleventh is raised."""
    client = FlakyClient(*(status_error(429) for _ in range(clusterview.READ_RETRIES + 1)))
    with pytest.raises(ApiStatusError) as raised:
        await clusterview.list_all(client, Pod)  # type: ignore[arg-type]
    assert raised.value.code == 429 and client.attempts == clusterview.READ_RETRIES + 1


@pytest.mark.parametrize("code", [403, 500])
async def test_other_failures_are_not_retried(code: int) -> None:
    """A 403, or a 500 without Retry-After, fails the read at once."""
    client = FlakyClient(status_error(code))
    with pytest.raises(ApiStatusError):
        await clusterview.list_all(client, Pod)  # type: ignore[arg-type]
    assert client.attempts == 1
