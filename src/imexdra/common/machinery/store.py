"""The informer's in-memory cache: objects by ``namespace/name`` key plus named secondary indexes.

Only the owning informer writes to a store; controllers read it (``get``, ``list``, ``by_index``) instead
of asking the API server, which is what keeps reconcile loops cheap at scale. Everything runs on one
event loop, so there are no locks. Stored objects are shared, not copied: treat them as read-only and
copy (``msgspec.structs.replace`` or ``copy.deepcopy``) before modifying one to send it back.

:func:`diff` is the pure core of a relist: what was added, changed or removed between the cache and a
fresh LIST. Its "removed" list is how objects deleted during a watch gap (410 Gone) still reach the
delete handlers, which a plain watch loop silently loses (docs/architecture.md §6).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from imexdra.common.kube.models.meta_v1 import ObjectMeta


class KubeObject(Protocol):
    """Anything with Kubernetes object metadata: every model of a kind, generated or ours."""

    @property
    def metadata(self) -> ObjectMeta | None:
        """The object's metadata."""


T = TypeVar("T", bound=KubeObject)
IndexFunc = Callable[[T], Iterable[str]]


def object_key(obj: KubeObject) -> str:
    """The cache key of ``obj``: ``namespace/name``, or ``name`` for cluster-scoped objects."""
    meta = obj.metadata
    if meta is None or not meta.name:
        raise ValueError("object has no metadata.name")
    return f"{meta.namespace}/{meta.name}" if meta.namespace else meta.name


def strip_managed_fields(obj: T) -> T:
    """Drop ``metadata.managedFields`` (client-go's ``TransformStripManagedFields``) and return ``obj``.

    Server-side apply's bookkeeping is two thirds of a small object's memory and nothing here reads it;
    a write that sends a cached object back without it leaves the server's copy as it was
    (docs/architecture.md §6).
    """
    if obj.metadata is not None:
        obj.metadata.managedFields = None
    return obj


def resource_version(obj: KubeObject) -> str | None:
    """``metadata.resourceVersion`` of ``obj``, if any."""
    return obj.metadata.resourceVersion if obj.metadata else None


def index_by_namespace(obj: KubeObject) -> list[str]:
    """Index function: the object's namespace."""
    return [obj.metadata.namespace] if obj.metadata and obj.metadata.namespace else []


def index_by_uid(obj: KubeObject) -> list[str]:
    """Index function: the object's UID (upstream indexes ComputeDomains this way)."""
    return [obj.metadata.uid] if obj.metadata and obj.metadata.uid else []


def index_by_owner_uid(obj: KubeObject) -> list[str]:
    """Index function: the UIDs of all owners in ``metadata.ownerReferences``."""
    refs = obj.metadata.ownerReferences if obj.metadata else None
    return [ref.uid for ref in refs or ()]


def index_by_label(label: str) -> IndexFunc[KubeObject]:
    """Index function factory: the value of ``label`` on the object (unlabelled objects are not indexed)."""

    def index(obj: KubeObject) -> list[str]:
        labels = obj.metadata.labels if obj.metadata else None
        return [labels[label]] if labels and label in labels else []

    return index


def index_by_node_name(obj: KubeObject) -> list[str]:
    """Index function: ``spec.nodeName`` (Pods, ResourceSlices); objects without one are not indexed."""
    node = getattr(getattr(obj, "spec", None), "nodeName", None)
    return [node] if isinstance(node, str) and node else []


@dataclass(slots=True)
class Changes(Generic[T]):
    """What a relist changed: new objects, (old, new) pairs whose resourceVersion moved, vanished objects."""

    added: list[T] = field(default_factory=list)
    updated: list[tuple[T, T]] = field(default_factory=list)
    deleted: list[T] = field(default_factory=list)


def diff(current: Mapping[str, T], listed: Iterable[T]) -> Changes[T]:
    """Compare the cached objects with a fresh LIST; unchanged objects (same resourceVersion) are skipped."""
    changes: Changes[T] = Changes()
    seen: set[str] = set()
    for obj in listed:
        key = object_key(obj)
        seen.add(key)
        old = current.get(key)
        if old is None:
            changes.added.append(obj)
        elif resource_version(old) != resource_version(obj):
            changes.updated.append((old, obj))
    changes.deleted = [obj for key, obj in current.items() if key not in seen]
    return changes


class Store(Generic[T]):
    """Objects by key, with named indexes kept in step on every write."""

    def __init__(self, indexers: Mapping[str, IndexFunc[T]] | None = None) -> None:
        self._items: dict[str, T] = {}
        self._indexers: dict[str, IndexFunc[T]] = {}
        self._indices: dict[str, dict[str, set[str]]] = {}
        for name, func in (indexers or {}).items():
            self.add_indexer(name, func)

    def add_indexer(self, name: str, func: IndexFunc[T]) -> None:
        """Add a named index; objects already stored are indexed immediately."""
        if name in self._indexers:
            raise ValueError(f"indexer {name!r} already exists")
        self._indexers[name] = func
        self._indices[name] = {}
        for key, obj in self._items.items():
            self._index(name, key, obj)

    def get(self, key: str) -> T | None:
        """The object stored under ``key`` (see :func:`object_key`), if any."""
        return self._items.get(key)

    def get_by_name(self, name: str, namespace: str | None = None) -> T | None:
        """The object called ``name`` (in ``namespace`` for namespaced kinds), if any."""
        return self._items.get(f"{namespace}/{name}" if namespace else name)

    def objects(self) -> list[T]:
        """All stored objects, in no particular order."""
        return list(self._items.values())

    def keys(self) -> list[str]:
        """All stored keys."""
        return list(self._items)

    def by_index(self, index: str, value: str) -> list[T]:
        """Objects whose index function returned ``value`` for the named index."""
        return [self._items[key] for key in self.index_keys(index, value)]

    def index_keys(self, index: str, value: str) -> list[str]:
        """Keys of the objects indexed under ``value`` in the named index."""
        if index not in self._indices:
            raise KeyError(f"no indexer named {index!r}")
        return sorted(self._indices[index].get(value, ()))

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def upsert(self, obj: T) -> T | None:
        """Store ``obj`` under its key and return the object it replaced, if any."""
        key = object_key(obj)
        old = self._items.get(key)
        if old is not None:
            self._unindex(key, old)
        self._items[key] = obj
        for name in self._indexers:
            self._index(name, key, obj)
        return old

    def delete(self, key: str) -> T | None:
        """Remove the object under ``key`` and return it, if there was one."""
        old = self._items.pop(key, None)
        if old is not None:
            self._unindex(key, old)
        return old

    def replace(self, objs: Iterable[T]) -> Changes[T]:
        """Make the store hold exactly ``objs`` and return what changed (the relist step)."""
        listed = list(objs)
        changes = diff(self._items, listed)
        for gone in changes.deleted:
            self.delete(object_key(gone))
        for obj in changes.added:
            self.upsert(obj)
        for _, new in changes.updated:
            self.upsert(new)
        return changes

    def _index(self, name: str, key: str, obj: T) -> None:
        index = self._indices[name]
        for value in self._indexers[name](obj):
            index.setdefault(value, set()).add(key)

    def _unindex(self, key: str, obj: T) -> None:
        for name, func in self._indexers.items():
            index = self._indices[name]
            for value in func(obj):
                keys = index.get(value)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del index[value]
