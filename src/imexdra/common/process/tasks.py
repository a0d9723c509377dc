"""Process lifecycle for the components' async ``run``: signals to a stop event, supervised services.

A component's ``run`` starts its long-lived services (informers, workers, the metrics server, the
event recorder, the gRPC server...) with :func:`supervise` and waits. The first of these ends it: a
stop signal (SIGTERM from the kubelet, Ctrl-C), a service failing, or a service returning (e.g. the
leader's work after losing the Lease). Then every service is cancelled and given a bounded grace
period to clean up, and the first failure, if any, is raised so ``main`` exits non-zero and Kubernetes
restarts the pod.

:func:`settle` runs the concurrent steps of one unit of work (e.g. a reconcile's writes) and, unlike
``asyncio.gather``, reports a failure only once every step has ended.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Coroutine, Mapping
from typing import Any, TypeVar

import structlog

T = TypeVar("T")

_log = structlog.get_logger(__name__)


def stop_on_signals(stop: asyncio.Event | None = None) -> asyncio.Event:
    """Return an event set by SIGTERM or SIGINT (installed on the running loop)."""
    event = stop if stop is not None else asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, _signalled, event, signum)
    return event


def _signalled(event: asyncio.Event, signum: signal.Signals) -> None:
    _log.info("Received signal, stopping", signal=signum.name)
    event.set()


async def supervise(
    services: Mapping[str, Coroutine[Any, Any, None]], *, stop: asyncio.Event, grace: float = 30.0
) -> None:
    """Run ``services`` (by name) until ``stop`` is set or one ends; then cancel all, waiting up to ``grace``.

    Raises the exception of the first service that failed; a service that returns without error ends
    the others just like ``stop`` does.
    """
    tasks = {asyncio.create_task(coro, name=name) for name, coro in services.items()}
    stopper = asyncio.create_task(stop.wait(), name="stop")
    try:
        done, _ = await asyncio.wait({*tasks, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (*tasks, stopper):
            task.cancel()
        _, stuck = await asyncio.wait({*tasks, stopper}, timeout=grace)
        for task in stuck:
            _log.warning("Shutdown grace period exceeded", service=task.get_name(), grace=grace)
    ended = sorted(task.get_name() for task in done if task is not stopper)
    if ended:
        _log.info("Service ended", services=ended)
    failures = [
        (task, error)
        for task in done
        if task is not stopper and not task.cancelled() and (error := task.exception()) is not None
    ]
    for task, error in failures:
        _log.error("Service failed", service=task.get_name(), error=f"{type(error).__name__}: {error}")
    if failures:
        raise failures[0][1]


async def settle(*steps: Awaitable[T]) -> list[T]:
    """Await ``steps`` concurrently; once all have ended, return their results or raise the first failure.

    "First" is in argument order. ``asyncio.gather`` raises at the first failure while the other steps
    keep running unawaited: a caller retried on failure would then start over while writes of its
    previous attempt are still in flight, and send them a second time (test_control_plane_faults: a
    DaemonSet create failed in an etcd outage while the claim-template creates of the same reconcile
    hung; the retry created the templates again and met 409 AlreadyExists).
    """
    results = await asyncio.gather(*steps, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return [result for result in results if not isinstance(result, BaseException)]
