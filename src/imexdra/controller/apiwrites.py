"""What the controller's decisions ask of the API server: the seam between deciding and writing.

The reconciler, the membership sync, the stale-object sweep, binding conditions and the network
policies depend on this Protocol, not on ``writes.Writer``, its one production implementation (over
the transport). Unit tests pass an in-memory implementation that records the writes and applies them
to the informer stores as the API server would, so the controller's decisions are tested without a
cluster (docs/architecture.md §3.1, "Testing seam").
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

from imexdra.api.computedomain import ComputeDomain, ComputeDomainStatus
from imexdra.common.kube.models.core_v1 import Node
from imexdra.common.machinery.store import KubeObject
from imexdra.controller.claimholds import PendingBinding
from imexdra.controller.overlay import Overlay

R = TypeVar("R", bound=KubeObject)


class ApiWrites(Protocol):
    """Every API write the controller makes (``writes.Writer`` documents each write's guard)."""

    async def create(self, obj: KubeObject, overlay: Overlay[R], *, cached_as: type[R] | None = None) -> R:
        """Create ``obj`` and record it in ``overlay``."""

    async def lookup(self, res: type[R], name: str, namespace: str | None) -> R | None:
        """The object as the API server has it now, or None (a read, not a write)."""

    async def delete(self, obj: R, overlay: Overlay[R], *, has_finalizers: bool = True) -> None:
        """Delete ``obj`` (already gone is fine) and record that it is going."""

    async def add_finalizer(self, cd: ComputeDomain, overlay: Overlay[ComputeDomain]) -> ComputeDomain:
        """Add the domain finalizer, guarded by the domain's resourceVersion."""

    async def remove_finalizer(self, obj: R, overlay: Overlay[R]) -> None:
        """Remove our finalizer from ``obj``."""

    async def write_status(
        self,
        cd: ComputeDomain,
        status: ComputeDomainStatus,
        overlay: Overlay[ComputeDomain],
        *,
        guarded: bool = False,
        clear_conditions: bool = False,
    ) -> ComputeDomain:
        """Replace the domain's status."""

    async def merge_patch(self, obj: R, patch: dict[str, Any], overlay: Overlay[R]) -> R:
        """Merge-patch an object the controller alone writes."""

    async def remove_node_label(self, node: Node, uid: str, overlay: Overlay[Node]) -> None:
        """Remove the domain label from ``node`` if it still names ``uid``."""

    async def add_node_label(self, name: str, uid: str, overlay: Overlay[Node]) -> str | None:
        """Label node ``name`` for domain ``uid`` unless it carries a domain label already."""

    async def set_device_conditions(
        self, claim: KubeObject, binding: PendingBinding, *, condition: str, reason: str, message: str
    ) -> bool:
        """Add binding conditions for the claim's pending devices; False when the write did not land."""
