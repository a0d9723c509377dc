"""Profiling endpoints under ``--pprof-path``: what Go's ``net/http/pprof`` gives, translated to Python.

Upstream's controller serves Go's pprof handlers there. A Python process has no goroutines, heap
profiles or execution traces, but an operator looking at a stuck or busy controller needs the same
answers: what is every task waiting for, and where does the time go. Served on the metrics server:

- ``<path>/`` (and ``<path>``): an index of the endpoints below;
- ``<path>/tasks``: every asyncio task of the event loop with the chain of ``await``s it is suspended
  in, outermost first (Python 3.11's ``Task.get_stack`` shows only the outermost coroutine);
- ``<path>/threads``: the stack of every thread;
- ``<path>/profile?seconds=N``: a statistical profile. A sampler thread reads every other thread's
  stack (``sys._current_frames``) 100 times a second for N seconds (default 30, at most 120) and returns
  collapsed stacks, one ``thread;outer;...;inner count`` line each, the input of flamegraph.pl,
  inferno or speedscope. Samples are wall-clock: an idle event loop shows up in the selector's
  ``select``. One profile at a time (409 otherwise); the handler only awaits the sampler, so the loop
  keeps serving while it runs. ``cProfile`` is not used: it instruments only the thread that enables
  it and slows every call of the loop it measures.
- ``<path>/cmdline``: the command line, NUL-separated, as Go's.

Go's runtime profiles (``goroutine``, ``heap``, ...) are answered with 501 and a pointer to the Python
equivalent, so ``go tool pprof`` users learn what to use instead of getting a 404.
"""

from __future__ import annotations

import asyncio
import linecache
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterable
from http import HTTPStatus
from types import CodeType, FrameType
from typing import Any
from urllib.parse import parse_qs

DEFAULT_PROFILE_SECONDS = 30.0
MAX_PROFILE_SECONDS = 120.0
SAMPLE_INTERVAL = 0.01
_MAX_AWAIT_DEPTH = 256  # a bound on the await chain walk; real chains are a few dozen deep

#: Go's runtime profiles, each with the closest thing this server has ({p}: the path prefix).
_GO_ONLY = {
    "goroutine": "the asyncio tasks are at {p}/tasks and the thread stacks at {p}/threads",
    "threadcreate": "the thread stacks are at {p}/threads",
    "trace": "a stack-sampling profile is at {p}/profile",
    "heap": "",
    "allocs": "",
    "block": "",
    "mutex": "",
    "symbol": "",
}

_Frame = tuple[str, int, str]  # file, line, function


def _future_iter_type() -> type:
    """The type of ``Future.__await__()`` (C asyncio's ``FutureIter``): what an awaiting coroutine holds."""
    loop = asyncio.new_event_loop()
    try:
        future = loop.create_future()
        return type(future.__await__())
    finally:
        loop.close()


_FUTURE_ITER = _future_iter_type()


def _frame_of(awaitable: Any) -> FrameType | None:
    for attribute in ("cr_frame", "ag_frame", "gi_frame"):
        frame = getattr(awaitable, attribute, None)
        if frame is not None:
            return frame  # type: ignore[no-any-return]
    return None


def _awaited_by(awaitable: Any) -> Any:
    for attribute in ("cr_await", "ag_await", "gi_yieldfrom"):
        inner = getattr(awaitable, attribute, None)
        if inner is not None:
            return inner
    return None


def _await_chain(task: asyncio.Task[Any]) -> tuple[list[_Frame], str]:
    """The frames ``task`` is suspended in (outermost first) and what the innermost one awaits."""
    frames: list[_Frame] = []
    current: Any = task.get_coro()
    for _ in range(_MAX_AWAIT_DEPTH):
        frame = _frame_of(current)
        if frame is None:
            break
        frames.append((frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_qualname))
        inner = _awaited_by(current)
        if inner is None:
            return frames, ""
        current = inner
    if not frames:
        return frames, ""
    if isinstance(current, asyncio.Future | _FUTURE_ITER):  # await of a Future, Task or sleep
        return frames, "awaiting a future"
    return frames, f"awaiting {type(current).__qualname__}"


def _format_frames(frames: Iterable[_Frame]) -> list[str]:
    lines = []
    for filename, lineno, function in frames:
        lines.append(f'  File "{filename}", line {lineno}, in {function}')
        source = linecache.getline(filename, lineno).strip()
        if source:
            lines.append(f"    {source}")
    return lines


async def task_dump() -> str:
    """Every pending asyncio task with its await chain; only the frame walk runs on the loop."""
    tasks = sorted(asyncio.all_tasks(), key=lambda task: task.get_name())
    chains = [(task.get_name(), _await_chain(task)) for task in tasks]

    def render() -> str:  # reading source lines touches the disk: off the loop
        lines = [f"{len(chains)} asyncio tasks in process {os.getpid()}", ""]
        for name, (frames, awaiting) in chains:
            lines.append(f"task {name!r}")
            lines += _format_frames(frames)
            if awaiting:
                lines.append(f"  {awaiting}")
            lines.append("")
        return "\n".join(lines)

    return await asyncio.to_thread(render)


def thread_dump() -> str:
    """The stack of every thread (outermost frame first), like a Python traceback."""
    names = {thread.ident: thread for thread in threading.enumerate()}
    frames = sys._current_frames()
    lines = [f"{len(frames)} threads in process {os.getpid()}", ""]
    for ident, frame in sorted(frames.items()):
        thread = names.get(ident)
        name = thread.name if thread is not None else "?"
        daemon = " daemon" if thread is not None and thread.daemon else ""
        lines.append(f"thread {name!r} ident={ident}{daemon}")
        stack: list[_Frame] = []
        walk: FrameType | None = frame
        while walk is not None:
            stack.append((walk.f_code.co_filename, walk.f_lineno, walk.f_code.co_qualname))
            walk = walk.f_back
        lines += _format_frames(reversed(stack))
        lines.append("")
    return "\n".join(lines)


def _code_name(code: CodeType) -> str:
    # Module path from the package root when it has one, so frames of two "main.py" stay apart.
    parts = code.co_filename.replace("\\", "/").split("/")
    short = "/".join(parts[-3:]) if len(parts) > 3 else code.co_filename
    return f"{code.co_qualname} ({short}:{code.co_firstlineno})".replace(";", ",")


def sample_stacks(seconds: float, stop: threading.Event, interval: float = SAMPLE_INTERVAL) -> Counter[str]:
    """Sample every other thread's stack each ``interval`` for ``seconds`` (or until ``stop``)."""
    me = threading.get_ident()
    names: dict[int, str] = {}
    counts: Counter[str] = Counter()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not stop.wait(interval):
        for ident, frame in sys._current_frames().items():
            if ident == me:
                continue
            if ident not in names:
                names = {t.ident: t.name for t in threading.enumerate() if t.ident is not None}
            stack: list[str] = []
            walk: FrameType | None = frame
            while walk is not None:
                stack.append(_code_name(walk.f_code))
                walk = walk.f_back
            stack.append(names.get(ident, f"thread-{ident}").replace(";", ",").replace(" ", "_"))
            counts[";".join(reversed(stack))] += 1
    return counts


class Profiler:
    """Serves the endpoints under one path prefix; at most one CPU profile runs at a time."""

    def __init__(self, path: str) -> None:
        self.path = path.rstrip("/")
        self._profiling = threading.Lock()

    def matches(self, url_path: str) -> bool:
        """Tell whether ``url_path`` is this prefix or below it."""
        return url_path == self.path or url_path.startswith(f"{self.path}/")

    async def respond(self, url_path: str, query: str) -> tuple[HTTPStatus, str]:
        """Answer a GET of ``url_path`` (one :meth:`matches` accepted) with a status and a text body."""
        name = url_path[len(self.path) :].strip("/")
        if name == "":
            return HTTPStatus.OK, self._index()
        if name == "tasks":
            return HTTPStatus.OK, await task_dump()
        if name == "threads":
            return HTTPStatus.OK, await asyncio.to_thread(thread_dump)
        if name == "cmdline":
            return HTTPStatus.OK, "\0".join(sys.orig_argv)
        if name == "profile":
            return await self._profile(query)
        if name in _GO_ONLY:
            hint = _GO_ONLY[name].format(p=self.path) or f"it has no equivalent here (see {self.path}/)"
            return HTTPStatus.NOT_IMPLEMENTED, f"{name} is a Go runtime profile; this is Python: {hint}\n"
        return HTTPStatus.NOT_FOUND, f"no profile {name!r}; see {self.path}/\n"

    async def _profile(self, query: str) -> tuple[HTTPStatus, str]:
        raw = parse_qs(query).get("seconds", [str(DEFAULT_PROFILE_SECONDS)])[0]
        try:
            seconds = float(raw)
        except ValueError:
            seconds = -1.0
        if not 0 < seconds <= MAX_PROFILE_SECONDS:
            message = f"seconds={raw!r}: must be a number in (0, {MAX_PROFILE_SECONDS:g}]\n"
            return HTTPStatus.BAD_REQUEST, message
        if not self._profiling.acquire(blocking=False):
            return HTTPStatus.CONFLICT, "a profile is already being taken; retry when it is done\n"
        stop = threading.Event()
        try:
            counts = await asyncio.to_thread(sample_stacks, seconds, stop)
        finally:
            stop.set()  # a cancelled request (server closing) ends the sampler at its next tick
            self._profiling.release()
        return HTTPStatus.OK, "".join(f"{stack} {count}\n" for stack, count in counts.most_common())

    def _index(self) -> str:
        p = self.path
        return (
            f"Profiling endpoints of process {os.getpid()} (Python {sys.version.split()[0]}):\n\n"
            f"{p}/tasks               asyncio tasks and the chain of awaits each is suspended in\n"
            f"{p}/threads             the stack of every thread\n"
            f"{p}/profile?seconds=N   wall-clock stack samples of every thread at"
            f" {1 / SAMPLE_INTERVAL:g} Hz for N seconds (default {DEFAULT_PROFILE_SECONDS:g},"
            f" at most {MAX_PROFILE_SECONDS:g}), as collapsed stacks for flamegraph.pl or speedscope\n"
            f"{p}/cmdline             the command line, NUL-separated\n\n"
            "Go's runtime profiles (goroutine, heap, allocs, block, mutex, threadcreate, symbol, trace)"
            " do not exist in a Python process and are answered with 501.\n"
        )
