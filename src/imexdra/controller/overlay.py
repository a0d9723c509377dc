"""Informer stores seen through the controller's own recent writes (upstream's "mutation cache").

An informer shows a write only once its watch event arrives, some milliseconds later. A reconcile that
runs in between would otherwise act on the old object: create again (409 AlreadyExists), update with a
stale resourceVersion (409 Conflict), or delete twice. The overlay returns the newer of the cached object
and the one our write returned (integer resourceVersion comparison, as upstream's mutation cache does);
a recorded write is dropped as soon as the informer has caught up, or after ``ttl`` as a safety net.

Deletions are recorded too: ``mark_deleting`` (the object lingers with finalizers; it reads as
terminating) and ``mark_gone`` (a finalizer-less object; it reads as absent until the informer agrees).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from imexdra.common.machinery.store import (
    KubeObject,
    Store,
    object_key,
    resource_version,
    strip_managed_fields,
)

T = TypeVar("T", bound=KubeObject)

#: Name of the index every overlaid store must have: the owning domain's UID.
DOMAIN_INDEX = "domain"


def _rv(obj: KubeObject | None) -> int:
    try:
        return int(resource_version(obj) or 0) if obj is not None else 0
    except ValueError:
        return 0


@dataclass(slots=True)
class _Written(Generic[T]):
    obj: T | None  # None: deleted and gone
    rv: int
    expires: float
    domain: str | None


class Overlay(Generic[T]):
    """One kind's stores (one per watched namespace, or one for all) plus recorded writes."""

    def __init__(
        self,
        stores: Sequence[Store[T]],
        domain_of: Callable[[T], str | None],
        *,
        ttl: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._stores = stores
        self._domain_of = domain_of
        self._ttl = ttl
        self._clock = clock
        self._written: dict[str, _Written[T]] = {}
        self._written_by_domain: dict[str, set[str]] = {}
        self._next_purge = clock() + ttl
        self._deleting: dict[str, tuple[str | None, float]] = {}  # key -> (uid, expiry)

    def _cached(self, key: str) -> T | None:
        for store in self._stores:
            obj = store.get(key)
            if obj is not None:
                return obj
        return None

    def get(self, key: str) -> T | None:
        """The freshest known version of the object under ``key`` (``namespace/name``)."""
        cached = self._cached(key)
        written = self._written.get(key)
        if written is None:
            return cached
        if cached is None:
            caught_up = written.obj is None
        elif written.obj is None:  # a tombstone: only a newer object (recreated) replaces it
            caught_up = _rv(cached) > written.rv
        else:
            caught_up = _rv(cached) >= written.rv
        if caught_up or self._clock() >= written.expires:
            self._drop(key)
            return cached
        return written.obj

    def by_domain(self, uid: str) -> list[T]:
        """Every object of the domain ``uid``, freshest versions, sorted by key."""
        keys = {key for store in self._stores for key in store.index_keys(DOMAIN_INDEX, uid)}
        keys.update(self._written_by_domain.get(uid, ()))
        objects = (self.get(key) for key in sorted(keys))
        return [obj for obj in objects if obj is not None and self._domain_of(obj) == uid]

    def all(self) -> list[T]:
        """Every cached object (the informers' view; used by the stale-object sweep)."""
        return [obj for store in self._stores for obj in store.objects()]

    def record(self, obj: T) -> None:
        """Remember an object a write of ours returned (one terminating without finalizers is gone)."""
        meta = strip_managed_fields(obj).metadata
        gone = meta is not None and meta.deletionTimestamp is not None and not meta.finalizers
        key = object_key(obj)
        previous = self._written.get(key)
        if previous is not None and previous.rv > _rv(obj):
            return  # concurrent writes may answer out of order; keep the newest
        self._remember(key, None if gone else obj, _rv(obj))

    def observe_deleted(self, obj: T) -> None:
        """The informer saw ``obj`` deleted: a recorded older version of it is obsolete."""
        key = object_key(obj)
        written = self._written.get(key)
        if written is not None and _rv(obj) >= written.rv:
            self._drop(key)

    def mark_gone(self, obj: T) -> None:
        """Remember that we deleted ``obj`` and that it has no finalizers (it reads as absent)."""
        self._remember(object_key(obj), None, _rv(obj))

    def _remember(self, key: str, obj: T | None, rv: int) -> None:
        now = self._clock()
        if now >= self._next_purge:  # records of objects nobody reads again expire here
            for stale in [k for k, w in self._written.items() if now >= w.expires]:
                self._drop(stale)
            for stale in [k for k, (_, expires) in self._deleting.items() if now >= expires]:
                del self._deleting[stale]
            self._next_purge = now + self._ttl
        self._drop(key)
        domain = self._domain_of(obj) if obj is not None else None
        self._written[key] = _Written(obj, rv, now + self._ttl, domain)
        if domain is not None:
            self._written_by_domain.setdefault(domain, set()).add(key)

    def _drop(self, key: str) -> None:
        written = self._written.pop(key, None)
        if written is not None and written.domain is not None:
            keys = self._written_by_domain.get(written.domain)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._written_by_domain[written.domain]

    def mark_deleting(self, obj: T) -> None:
        """Remember that we asked for the deletion of ``obj`` (this very object: same UID)."""
        uid = obj.metadata.uid if obj.metadata else None
        self._deleting[object_key(obj)] = (uid, self._clock() + self._ttl)

    def terminating(self, obj: T) -> bool:
        """Whether ``obj`` is being deleted, as far as we know."""
        meta = obj.metadata
        if meta is not None and meta.deletionTimestamp is not None:
            return True
        key = object_key(obj)
        marker = self._deleting.get(key)
        if marker is None:
            return False
        uid, expires = marker
        if self._clock() >= expires or (meta is not None and meta.uid != uid):
            del self._deleting[key]
            return False
        return True
