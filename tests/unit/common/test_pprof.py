"""The profiling endpoints under --pprof-path: index, task and thread dumps, the sampling profile."""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import AsyncIterator

import pytest
from prometheus_client import CollectorRegistry

from imexdra.common.observability.metrics import Probes, start_http_server
from imexdra.common.observability.pprof import MAX_PROFILE_SECONDS, sample_stacks
from tests.support.http import http_get
from tests.support.waiting import eventually

PPROF = "/debug/pprof"


@pytest.fixture
async def port() -> AsyncIterator[int]:
    """A metrics server with profiling under /debug/pprof."""
    server = await start_http_server(
        "127.0.0.1", 0, probes=Probes(), registry=CollectorRegistry(), pprof_path=PPROF + "/"
    )
    yield server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()


@pytest.mark.parametrize("target", [PPROF, PPROF + "/"])
async def test_index_lists_the_endpoints(port: int, target: str) -> None:
    """The prefix, with or without its slash, is an index naming every endpoint and Go's absent ones."""
    status, headers, body = await http_get(port, target)
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    for name in ("tasks", "threads", "profile?seconds=N", "cmdline"):
        assert f"{PPROF}/{name}" in body
    assert "goroutine" in body and "501" in body


async def nested_wait(event: asyncio.Event) -> None:
    """A coroutine two awaits deep, so the dump must walk the chain."""
    await event.wait()


async def test_tasks_show_each_task_s_await_chain(port: int) -> None:
    """Every task is listed by name with its chain of awaits down to the innermost function."""
    event = asyncio.Event()
    waiter = asyncio.create_task(nested_wait(event), name="the-waiter")
    await asyncio.sleep(0)
    try:
        status, _, body = await http_get(port, f"{PPROF}/tasks")
    finally:
        event.set()
        await waiter
    assert status == 200
    section = body.split("task 'the-waiter'\n", 1)[1].split("\n\n", 1)[0]
    assert "in nested_wait" in section and "in Event.wait" in section
    assert section.rstrip().endswith("awaiting a future")
    assert body.splitlines()[0].endswith(tuple("0123456789")) and "asyncio tasks in process" in body


def park(stop: threading.Event) -> None:
    """A thread function to find in the thread dump."""
    stop.wait(10)


async def test_threads_show_every_thread_s_stack(port: int) -> None:
    """Each thread is listed by name with its stack, innermost frame last."""
    stop = threading.Event()
    thread = threading.Thread(target=park, args=(stop,), name="parked-thread", daemon=True)
    thread.start()
    try:
        status, _, body = await http_get(port, f"{PPROF}/threads")
    finally:
        stop.set()
        thread.join()
    assert status == 200
    section = body.split("thread 'parked-thread'", 1)[1].split("\n\n", 1)[0]
    assert "in park" in section and "stop.wait(10)" in section
    assert "thread 'MainThread'" in body


def sampling() -> bool:
    """Tell whether a profile is being taken: some thread is inside the sampler."""
    for frame in sys._current_frames().values():
        walk = frame
        while walk is not None:
            if walk.f_code is sample_stacks.__code__:
                return True
            walk = walk.f_back
    return False


def spin(stop: threading.Event) -> None:
    """Busy work for the profiler to find."""
    while not stop.is_set():
        sum(range(1000))


async def test_profile_returns_collapsed_stacks_without_blocking_the_loop(port: int) -> None:
    """A short profile samples every thread into 'a;b;c count' lines; the loop keeps serving meanwhile."""
    stop = threading.Event()
    thread = threading.Thread(target=spin, args=(stop,), name="spinner", daemon=True)
    thread.start()
    try:
        profile = asyncio.create_task(http_get(port, f"{PPROF}/profile?seconds=2"))
        await eventually("the profile being taken", sampling, within=5, interval=0.01)
        assert (await http_get(port, "/healthz"))[0] == 200
        # Answered while the profile still runs: a profile holding the loop would answer only after it.
        assert not profile.done(), "the profile must not hold the event loop"
        status, _, body = await profile
    finally:
        stop.set()
        thread.join()
    assert status == 200
    lines = body.splitlines()
    assert lines and all(line.rsplit(" ", 1)[1].isdigit() for line in lines)
    spinner = [line for line in lines if line.startswith("spinner;")]
    assert spinner and any("spin (" in line for line in spinner)
    # Every round samples every thread: the spinner ran throughout, as did the main thread, so both
    # were seen in each round. How many rounds fit in the 2 s is the machine's load, not a behaviour.
    rounds = sum(int(line.rsplit(" ", 1)[1]) for line in lines if line.startswith("MainThread;"))
    assert rounds >= 1
    assert sum(int(line.rsplit(" ", 1)[1]) for line in spinner) == rounds


async def test_a_second_concurrent_profile_is_refused(port: int) -> None:
    """One profile at a time: a second request meanwhile gets 409; afterwards profiling works again."""
    first = asyncio.create_task(http_get(port, f"{PPROF}/profile?seconds=0.5"))
    await eventually("the first profile being taken", sampling, within=5, interval=0.01)
    status, _, body = await http_get(port, f"{PPROF}/profile?seconds=0.1")
    assert status == 409 and "already" in body
    assert (await first)[0] == 200
    assert (await http_get(port, f"{PPROF}/profile?seconds=0.05"))[0] == 200


@pytest.mark.parametrize("seconds", ["0", "-1", "abc", str(MAX_PROFILE_SECONDS + 1)])
async def test_profile_duration_is_bounded(port: int, seconds: str) -> None:
    """The duration must be a positive number up to the maximum."""
    status, _, body = await http_get(port, f"{PPROF}/profile?seconds={seconds}")
    assert status == 400 and "must be a number" in body


@pytest.mark.parametrize(
    ("name", "status", "fragment"),
    [
        ("goroutine", 501, f"{PPROF}/tasks"),
        ("heap", 501, "no equivalent"),
        ("trace", 501, f"{PPROF}/profile"),
        ("nonsense", 404, "no profile 'nonsense'"),
        ("cmdline", 200, "python"),
    ],
)
async def test_go_profiles_are_refused_with_a_pointer(
    port: int, name: str, status: int, fragment: str
) -> None:
    """Go's runtime profiles say what to use instead; unknown names are 404; cmdline is served."""
    got_status, _, body = await http_get(port, f"{PPROF}/{name}")
    assert got_status == status
    assert fragment in (body.lower() if name == "cmdline" else body)


async def test_profiling_is_off_without_a_path() -> None:
    """Without --pprof-path nothing is served under /debug/pprof (404), like upstream's empty default."""
    server = await start_http_server("127.0.0.1", 0, probes=Probes(), registry=CollectorRegistry())
    port = server.sockets[0].getsockname()[1]
    try:
        for target in (f"{PPROF}/", f"{PPROF}/tasks", f"{PPROF}/profile?seconds=1"):
            assert (await http_get(port, target))[0] == 404
    finally:
        server.close()
        await server.wait_closed()
