"""Informers: keep a :class:`~.store.Store` in step with the API server and fan out events.

The reflector loop is client-go's (no Python library has one; docs/architecture.md §6), on the
component's ``KubeApi``:

1. LIST in pages (a consistent read), diff the result against the store, emit add/update/delete;
2. WATCH from the list's resourceVersion with ``allowWatchBookmarks=true`` and a jittered
   ``timeoutSeconds``; every event and bookmark advances the resume point, and a stream the server
   closes is reopened from there without a relist;
3. on 410 Gone (the resume point left the server's window) relist: objects deleted during the gap reach
   the delete handlers as synthetic deletes carrying their last cached state;
4. on any other failure reconnect after a jittered exponential backoff (0.8 s → 30 s), resuming the
   watch when possible. Failures never end the loop; only cancellation does.

Handlers run inline on the event loop and must be quick and non-blocking: the usual handler just puts
a key on a :class:`~imexdra.common.machinery.workqueue.WorkQueue` (see :func:`enqueue`).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import msgspec
import structlog

from imexdra.common.kube.api import KubeApi, WatchEvent
from imexdra.common.kube.client import ApiStatusError, RetryableApiError
from imexdra.common.kube.kubeclient import decode
from imexdra.common.kube.models.meta_v1 import Status
from imexdra.common.kube.resource import api_info, decode_object
from imexdra.common.machinery.store import (
    Changes,
    IndexFunc,
    KubeObject,
    Store,
    object_key,
    resource_version,
    strip_managed_fields,
)
from imexdra.common.observability.metrics import REFLECTOR_LISTS, REFLECTOR_WATCH_EVENTS
from imexdra.common.pacing.ratelimit import Backoff

T = TypeVar("T", bound=KubeObject)
T_contra = TypeVar("T_contra", contravariant=True)
K_contra = TypeVar("K_contra", contravariant=True)

_log = structlog.get_logger(__name__)

#: A watch stream that ends sooner than this without delivering anything counts as a failure, so a
#: server that keeps closing streams at once cannot turn the loop into a busy loop.
_MIN_HEALTHY_WATCH = 1.0


class ResourceExpiredError(Exception):
    """The resume point is older than the server keeps (410 Gone): the cache must be rebuilt by a LIST."""


class _BookmarkMeta(msgspec.Struct):
    resource_version: str = msgspec.field(default="", name="resourceVersion")


class _Bookmark(msgspec.Struct):
    """Just enough of a BOOKMARK's object: decoding it as the real kind fails on required fields."""

    metadata: _BookmarkMeta


@dataclass(frozen=True, slots=True)
class EventHandler(Generic[T_contra]):
    """Callbacks for one consumer of an informer; any may be omitted."""

    on_add: Callable[[T_contra], None] | None = None
    on_update: Callable[[T_contra, T_contra], None] | None = None
    on_delete: Callable[[T_contra], None] | None = None


def follow_latest(seen: Callable[[T], None], gone: Callable[[T], None]) -> EventHandler[T]:
    """A handler for a consumer that keeps each object's latest version.

    ``seen`` on add and on update (with the new object), ``gone`` on delete.
    """
    return EventHandler(on_add=seen, on_update=lambda _old, new: seen(new), on_delete=gone)


class _Queue(Protocol[K_contra]):
    def add(self, item: K_contra, /) -> None: ...


def enqueue(queue: _Queue[str], key: Callable[[T], str | None] = object_key) -> EventHandler[T]:
    """A handler that adds ``key(obj)`` to ``queue`` on every add, update and delete (None = skip).

    The default key is the object's own ``namespace/name``; map to an owner's key to reconcile the
    owner when a child changes.
    """

    def add(obj: T) -> None:
        item = key(obj)
        if item is not None:
            queue.add(item)

    return follow_latest(add, add)


def api_kind(resource: type[Any]) -> str:
    """The API kind of a kind's class, e.g. ``ResourceClaim``."""
    kind: str = api_info(resource).kind
    return kind


class Informer(Generic[T]):
    """Lists and watches one kind (optionally one namespace and selectors) into an indexed store.

    Args:
        client: the component's client (``common.kube.connection.Connection.kube``).
        resource: a kind's class, generated (``common.kube.models``) or ours.
        namespace: watch one namespace; None = all namespaces (or a cluster-scoped kind).
        label_selector: Kubernetes label selector string, e.g. ``"resource.nvidia.com/computeDomain"``.
        field_selector: Kubernetes field selector string, e.g. ``"spec.nodeName=node-1"``.
        indexers: named index functions for the store (see :mod:`imexdra.common.machinery.store`).
        resync_period: if set, re-deliver every cached object as an update this often (level-triggered
            safety net, upstream uses 10 min).
        page_size: objects per LIST page.
        watch_timeout: lower bound of the server-side watch timeout; each watch picks a value up to
            twice this, so many informers do not reconnect in lockstep.

    """

    def __init__(
        self,
        client: KubeApi,
        resource: type[T],
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        indexers: Mapping[str, IndexFunc[T]] | None = None,
        resync_period: float | None = None,
        page_size: int = 500,
        watch_timeout: float = 300.0,
    ) -> None:
        self.resource = resource
        self.store: Store[T] = Store(indexers)
        self._client = client
        self._namespace = namespace
        self._labels, self._fields = label_selector, field_selector
        self._selectors = {
            k: v for k, v in (("labelSelector", label_selector), ("fieldSelector", field_selector)) if v
        }
        self._resync_period = resync_period
        self._page_size = page_size
        self._watch_timeout = watch_timeout
        self._handlers: list[EventHandler[T]] = []
        self._synced = asyncio.Event()
        self._resource_version: str | None = None
        #: The API kind, as logs and metrics name it (a slim projection such as ``ChannelClaim`` says
        #: ``ResourceClaim``: that is what an operator lists).
        self.kind: str = api_kind(resource)
        self._log = _log.bind(resource=self.kind, namespace=namespace or "*", **self._selectors)

    @property
    def resource_version(self) -> str | None:
        """Where the next watch resumes: the last list, event or bookmark resourceVersion."""
        return self._resource_version

    def add_handler(self, handler: EventHandler[T]) -> None:
        """Register callbacks; objects already cached are delivered to ``on_add`` at once."""
        self._handlers.append(handler)
        if handler.on_add is not None:
            for obj in self.store.objects():
                self._call(handler.on_add, obj)

    def has_synced(self) -> bool:
        """True once the first LIST has been stored and delivered to the handlers."""
        return self._synced.is_set()

    async def wait_for_sync(self) -> None:
        """Wait until :meth:`has_synced`."""
        await self._synced.wait()

    async def run(self) -> None:
        """List and watch until cancelled. A restarted run resumes from :attr:`resource_version`."""
        async with asyncio.TaskGroup() as group:
            if self._resync_period:
                group.create_task(self._resync_loop(self._resync_period))
            await self._reflect()

    async def _reflect(self) -> None:
        backoff = Backoff(base=0.8, cap=30.0)
        while True:
            try:
                if self._resource_version is None:
                    await self._list("expired" if self.has_synced() else "initial")
                    backoff.reset()
                if await self._watch(self._resource_version or ""):
                    backoff.reset()
                    continue
                failure = "watch stream ended at once"
            except ResourceExpiredError:
                self._log.info("Watch expired; listing again", resource_version=self._resource_version)
                self._resource_version = None
                continue
            except (ApiStatusError, msgspec.DecodeError) as error:
                failure = str(error)  # incl. 403 until RBAC lands and 404 until a CRD does: keep trying
            except Exception as error:  # a bug must not silently stop the cache; keep it visible
                self._log.exception("Reflector failed")
                failure = f"{type(error).__name__}: {error}"
            delay = backoff.next_delay()
            self._log.warning("Failed to watch", error=failure, retry_in=round(delay, 2))
            await asyncio.sleep(delay)

    async def _list(self, reason: str) -> None:
        items: list[T] = []
        token: str | None = None
        self._log.info("Listing and watching", v=3, reason=reason)  # client-go's line and level
        while True:
            try:
                page = await self._client.list_page(
                    self.resource,
                    namespace=self._namespace,
                    labels=self._labels,
                    fields=self._fields,
                    limit=self._page_size,
                    continue_token=token,
                    action=f"list {self.kind}",
                )
            except ApiStatusError as error:
                if error.code == 410:  # the continue token outlived the server's window
                    raise ResourceExpiredError(str(error)) from error
                raise
            items.extend(map(strip_managed_fields, page.items))
            if not page.continue_token:
                break
            token = page.continue_token
        REFLECTOR_LISTS.labels(resource=self.kind, reason=reason).inc()
        self._dispatch(self.store.replace(items))
        rv = page.resource_version
        self._resource_version = rv
        self._synced.set()
        self._log.info("Caches populated", v=2, count=len(items), resource_version=rv, reason=reason)

    async def _watch(self, since: str) -> bool:
        """Watch from ``since`` until the server ends the stream; tell whether the stream was healthy."""
        server_timeout = int(self._watch_timeout * (1.0 + random.random()))  # noqa: S311 - spreading only
        loop = asyncio.get_running_loop()
        started, delivered = loop.time(), False
        try:
            async with self._client.watch(
                self.resource,
                namespace=self._namespace,
                resource_version=since,
                labels=self._labels,
                fields=self._fields,
                timeout_seconds=server_timeout,
                # A read timeout beyond the server's own deadline detects a silently dead connection.
                read_timeout=server_timeout + 30.0,
                action=f"watch {self.kind}",
            ) as events:
                async for event in events:
                    self._handle_watch_event(event)
                    delivered = True
        except ApiStatusError as error:
            if error.code == 410:
                raise ResourceExpiredError(str(error)) from error
            raise
        return delivered or loop.time() - started >= _MIN_HEALTHY_WATCH

    def _handle_watch_event(self, event: WatchEvent) -> None:
        REFLECTOR_WATCH_EVENTS.labels(resource=self.kind, type=event.type).inc()
        if event.type == "BOOKMARK":
            bookmark = msgspec.json.decode(event.object, type=_Bookmark)
            self._resource_version = bookmark.metadata.resource_version or self._resource_version
            return
        if event.type == "ERROR":
            status = decode_object(event.object, Status)
            if status.code == 410:
                raise ResourceExpiredError(status.message)
            raise RetryableApiError(
                f"watch {self.kind}: {status.code} {status.reason}: {status.message}",
                code=status.code,
                reason=status.reason or "",
            )
        try:
            obj: T = strip_managed_fields(decode(event, self.resource))
        except msgspec.ValidationError as error:  # one malformed object must not stall the whole kind
            self._log.error(
                "Skipping an object that cannot be decoded", error=str(error), event_type=event.type
            )
            return
        if event.type == "DELETED":
            self.store.delete(object_key(obj))
            self._dispatch(Changes(deleted=[obj]))
        else:
            old = self.store.upsert(obj)
            self._dispatch(Changes(added=[obj]) if old is None else Changes(updated=[(old, obj)]))
        self._resource_version = resource_version(obj) or self._resource_version

    async def _resync_loop(self, period: float) -> None:
        await self._synced.wait()
        while True:
            await asyncio.sleep(period)
            self._dispatch(Changes(updated=[(obj, obj) for obj in self.store.objects()]))

    def _dispatch(self, changes: Changes[T]) -> None:
        for handler in self._handlers:
            if handler.on_delete is not None:
                for obj in changes.deleted:
                    self._call(handler.on_delete, obj)
            if handler.on_add is not None:
                for obj in changes.added:
                    self._call(handler.on_add, obj)
            if handler.on_update is not None:
                for old, new in changes.updated:
                    self._call(handler.on_update, old, new)

    def _call(self, callback: Callable[..., None], *args: T) -> None:
        try:
            callback(*args)
        except Exception:  # a buggy consumer must not stop the cache for the others
            self._log.exception("Event handler failed", key=object_key(args[-1]))
