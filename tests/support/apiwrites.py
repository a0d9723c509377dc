"""An in-memory ``ApiWrites`` (the controller's writer seam): records writes, applies them, fails on cue.

Not a fake API server: it stands in for our own Protocol (``imexdra.controller.apiwrites``). Each write
is logged as (verb, ``namespace/name``), recorded in the overlay as ``writes.Writer`` does, and applied
to the informer store holding that kind, as the API server and the watch would, so a second reconcile
sees the first's writes. ``fail(verb, code)`` makes the next call of ``verb`` raise the error the
``Writer`` raises for that HTTP status (retryable for 401/403/409/5xx, permanent for 404/422).
Node labels, which no store here holds whole (the controller watches labelled nodes only), are kept
in ``node_labels``; device conditions are listed in ``conditions``.
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass, field
from typing import Any

import msgspec

from imexdra.api.constants import COMPUTE_DOMAIN_FINALIZER, COMPUTE_DOMAIN_LABEL_KEY
from imexdra.common.kube.client import PermanentApiError, RetryableApiError, is_retryable_status
from imexdra.common.machinery.store import Store, object_key
from imexdra.controller.writes import authorization_retried


def api_error(code: int, action: str = "write") -> Exception:
    """The error the controller's ``Writer`` raises when the API server answers ``code``."""
    kind = RetryableApiError if is_retryable_status(code) else PermanentApiError
    return authorization_retried(kind(f"{action}: {code}", code=code))


@dataclass
class FakeWrites:
    """Writes applied to ``stores`` (one per kind, keyed by the resource class or ``cached_as``)."""

    stores: dict[type[Any], Store[Any]]
    log: list[tuple[str, str]] = field(default_factory=list)
    failures: dict[str, list[int]] = field(default_factory=dict)
    #: The domain label each node carries as the API server has it (a node not named: unlabelled).
    node_labels: dict[str, str] = field(default_factory=dict)
    #: Nodes the API server no longer has: labelling one finds nothing.
    gone_nodes: set[str] = field(default_factory=set)
    #: (claim ``namespace/name``, condition, reason) per device-condition write.
    conditions: list[tuple[str, str, str]] = field(default_factory=list)
    _versions: itertools.count[int] = field(default_factory=lambda: itertools.count(100))

    def fail(self, verb: str, code: int, times: int = 1) -> None:
        """Make the next ``times`` calls of ``verb`` fail with HTTP status ``code``."""
        self.failures.setdefault(verb, []).extend([code] * times)

    def verbs(self) -> list[str]:
        """The verbs written, in order."""
        return [verb for verb, _ in self.log]

    def touched(self) -> set[str]:
        """Every ``namespace/name`` written to."""
        return {key for _, key in self.log}

    def _call(self, verb: str, obj: Any) -> None:
        self._log(verb, object_key(obj))

    def _log(self, verb: str, key: str) -> None:
        pending = self.failures.get(verb)
        if pending:
            raise api_error(pending.pop(0), verb)
        self.log.append((verb, key))

    def _stored(self, obj: Any, store_as: type[Any] | None = None) -> Any:
        # A copy, as the API server returns one: the caller's object (often the store's) stays as read.
        new = copy.deepcopy(obj)
        assert new.metadata is not None
        new.metadata.resourceVersion = str(next(self._versions))
        new.metadata.uid = new.metadata.uid or f"uid-{new.metadata.name}"
        store = self.stores.get(store_as or type(obj))
        if store is not None:
            store.upsert(new)
        return new

    async def create(self, obj: Any, overlay: Any, *, cached_as: type[Any] | None = None) -> Any:
        """Create ``obj``: logged, stored, recorded."""
        self._call("create", obj)
        created = self._stored(obj, cached_as)
        overlay.record(created)
        return created

    async def lookup(self, res: type[Any], name: str, namespace: str | None) -> Any:
        """What the store of ``res`` holds."""
        store = self.stores.get(res)
        return store.get_by_name(name, namespace) if store is not None else None

    async def delete(self, obj: Any, overlay: Any, *, has_finalizers: bool = True) -> None:
        """Delete ``obj``; it lingers (marked) while it has finalizers."""
        self._call("delete", obj)
        if has_finalizers:
            overlay.mark_deleting(obj)
        else:
            overlay.mark_gone(obj)

    async def add_finalizer(self, cd: Any, overlay: Any) -> Any:
        """Add the domain finalizer."""
        self._call("add_finalizer", cd)
        written = self._stored(cd)
        written.metadata.finalizers = [*(written.metadata.finalizers or []), COMPUTE_DOMAIN_FINALIZER]
        overlay.record(written)
        return written

    async def remove_finalizer(self, obj: Any, overlay: Any) -> None:
        """Remove our finalizer."""
        self._call("remove_finalizer", obj)
        overlay.mark_gone(obj)

    async def write_status(self, cd: Any, status: Any, overlay: Any, **_: Any) -> Any:
        """Replace the domain's status."""
        self._call("write_status", cd)
        written = self._stored(msgspec.structs.replace(cd, status=status))
        overlay.record(written)
        return written

    async def merge_patch(self, obj: Any, patch: dict[str, Any], overlay: Any) -> Any:
        """Logged only; the object is returned as it was."""
        self._call("merge_patch", obj)
        return obj

    async def remove_node_label(self, node: Any, uid: str, overlay: Any) -> None:
        """Logged; the label goes if it still names ``uid``; the node reads as gone from the labelled set."""
        self._call("remove_node_label", node)
        name = node.metadata.name
        labels = node.metadata.labels or {}
        if self.node_labels.get(name, labels.get(COMPUTE_DOMAIN_LABEL_KEY)) == uid:
            self.node_labels.pop(name, None)
        overlay.mark_gone(node)

    async def add_node_label(self, name: str, uid: str, overlay: Any) -> str | None:
        """Logged; labels an unlabelled node; the label the node carries now, None for a gone node."""
        self._log("add_node_label", name)
        if name in self.gone_nodes:
            return None
        return self.node_labels.setdefault(name, uid)

    async def set_device_conditions(
        self, claim: Any, binding: Any, *, condition: str, reason: str, **_: Any
    ) -> bool:
        """Logged with the condition and its reason."""
        self._call("set_device_conditions", claim)
        self.conditions.append((object_key(claim), condition, reason))
        return True
