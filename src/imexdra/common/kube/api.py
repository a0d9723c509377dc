"""The seam between components and the API server: the :class:`KubeApi` Protocol and its small types.

Components and the machinery (informers, leader election, events, the slice publisher) type their
client as :class:`KubeApi`; ``common.kube.kubeclient.KubeClient`` is the one implementation that speaks
HTTP, and a test may pass an in-memory fake instead (docs/kube-client.md). Objects are models of a
kind (``common.kube.resource``): the generated ones (``common.kube.models``) or ours
(``api.computedomain``). Every failure is an ``ApiStatusError`` (``common.kube.client``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from enum import Enum
from typing import Any, Generic, Protocol, TypeVar

import msgspec

from imexdra.common.kube.transport import Response

R = TypeVar("R")

#: ``namespace=ALL_NAMESPACES`` lists or watches a namespaced kind in every namespace.
ALL_NAMESPACES = "*"


class PatchType(Enum):
    """A PATCH's kind, by its content type."""

    #: A JSON patch (RFC 6902): a list of operations.
    JSON = "application/json-patch+json"
    #: A JSON merge patch (RFC 7386): null deletes, lists are replaced whole.
    MERGE = "application/merge-patch+json"
    #: Kubernetes' strategic merge patch: lists merge by their patch merge key.
    STRATEGIC = "application/strategic-merge-patch+json"
    #: Server-side apply of a whole intended object as this client's field manager.
    APPLY = "application/apply-patch+yaml"


Selector = str | Mapping[str, str | None] | Mapping[str, str]


class WatchEvent(msgspec.Struct):
    """One line of a WATCH: ADDED, MODIFIED, DELETED, BOOKMARK or ERROR, and its undecoded object."""

    type: str
    object: msgspec.Raw


@dataclass(frozen=True, slots=True)
class ListPage(Generic[R]):
    """One page of a LIST: its objects, the list's resourceVersion, and the token of the next page."""

    items: list[R]
    resource_version: str
    continue_token: str | None


def selector(value: Selector | None) -> str:
    """A label or field selector as the API takes it: ``{"a": "b", "c": None}`` is ``"a=b,c"``."""
    if value is None or isinstance(value, str):
        return value or ""
    return ",".join(key if wanted is None else f"{key}={wanted}" for key, wanted in value.items())


class KubeApi(Protocol):
    """What components ask of the API server (implemented by ``KubeClient``)."""

    field_manager: str

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        action: str | None = None,
    ) -> Response:
        """A raw request (the caller encodes and decodes); raises unless 2xx."""
        ...

    async def get(
        self, res: type[R], name: str, *, namespace: str | None = None, action: str | None = None
    ) -> R:
        """The named object."""
        ...

    async def list_page(
        self,
        res: type[R],
        *,
        namespace: str | None = None,
        labels: Selector | None = None,
        fields: Selector | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
        action: str | None = None,
    ) -> ListPage[R]:
        """One page of a LIST."""
        ...

    def list(
        self,
        res: type[R],
        *,
        namespace: str | None = None,
        labels: Selector | None = None,
        fields: Selector | None = None,
        chunk_size: int = 500,
        action: str | None = None,
    ) -> AsyncIterator[R]:
        """Every matching object, page after page."""
        ...

    async def create(self, obj: R, *, namespace: str | None = None, action: str | None = None) -> R:
        """Create ``obj``; the object as stored."""
        ...

    async def replace(self, obj: R, *, namespace: str | None = None, action: str | None = None) -> R:
        """Update ``obj`` as a whole."""
        ...

    async def patch(
        self,
        res: type[R],
        name: str,
        patch: Any,
        *,
        namespace: str | None = None,
        patch_type: PatchType = PatchType.STRATEGIC,
        force: bool = False,
        action: str | None = None,
    ) -> R:
        """Patch the named object."""
        ...

    async def apply(self, obj: R, *, namespace: str | None = None, force: bool = False) -> R:
        """Server-side apply ``obj``."""
        ...

    async def delete(
        self,
        res: type[Any],
        name: str,
        *,
        namespace: str | None = None,
        grace_period: int | None = None,
        action: str | None = None,
    ) -> None:
        """Delete the named object."""
        ...

    def watch(
        self,
        res: type[Any],
        *,
        namespace: str | None = None,
        resource_version: str = "",
        labels: Selector | None = None,
        fields: Selector | None = None,
        timeout_seconds: int | None = None,
        bookmarks: bool = True,
        read_timeout: float | None = None,
        action: str | None = None,
    ) -> AbstractAsyncContextManager[AsyncIterator[WatchEvent]]:
        """WATCH from ``resource_version``; leaving the block closes the stream."""
        ...

    def close(self) -> None:
        """Close pooled connections."""
        ...
