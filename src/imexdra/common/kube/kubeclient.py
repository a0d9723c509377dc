"""The typed Kubernetes API client every component uses: our models of the kinds over our transport.

One client, one transport (``common.kube.transport``), watches included, so every request shares one
error model (``ApiStatusError``), one 401 retry, one QPS bucket with client-go's ``rest_client_*``
metrics, one set of credentials and one proxy (docs/kube-client.md). The objects are models of kinds
(``common.kube.models``, generated from the API's OpenAPI spec, or ours in ``api``): their URL facts
and decoders are ``common.kube.resource``'s.

Components depend on :class:`~imexdra.common.kube.api.KubeApi`, the Protocol this class implements, so
a test can hand them an in-memory fake. Errors name the call as ``"<verb> <Kind> [<ns>/]<name>"`` unless
the caller gives an ``action``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import msgspec

from imexdra.common.kube.api import ALL_NAMESPACES, ListPage, PatchType, Selector, WatchEvent, selector
from imexdra.common.kube.resource import api_info, decode_list, decode_object, is_resource
from imexdra.common.kube.transport import Response, Transport, resource_path

R = TypeVar("R")


def _where(name: str, namespace: str | None) -> str:
    return f"{namespace}/{name}" if namespace and namespace != ALL_NAMESPACES else name


def _scope(res: type[Any], namespace: str | None) -> str | None:
    """The namespace segment of ``res``'s URL: none for cluster-scoped kinds and for all namespaces."""
    if not api_info(res).namespaced or namespace in (None, ALL_NAMESPACES):
        return None
    return namespace


def _names(obj: Any, namespace: str | None) -> tuple[str, str | None]:
    meta = getattr(obj, "metadata", None)
    name = getattr(meta, "name", None)
    if not name:
        raise ValueError(f"{type(obj).__name__} has no metadata.name")
    return name, namespace or getattr(meta, "namespace", None)


def _body(obj: Any) -> bytes:
    """``obj`` as JSON, with its apiVersion and kind filled in from its class when unset."""
    if is_resource(obj) and isinstance(obj, msgspec.Struct):
        info = api_info(obj)
        missing = {
            field: value
            for field, value in (("apiVersion", info.api_version), ("kind", info.kind))
            if hasattr(obj, field) and not getattr(obj, field)
        }
        if missing:
            obj = msgspec.structs.replace(obj, **missing)
    return msgspec.json.encode(obj)


class KubeClient:
    """Typed get/list/create/replace/patch/apply/delete/watch on one :class:`Transport`.

    ``field_manager`` is recorded as the writer of every field a create, replace, patch or apply sets.
    """

    def __init__(self, transport: Transport, *, field_manager: str) -> None:
        self._transport = transport
        self.field_manager = field_manager

    def close(self) -> None:
        """Close the transport's pooled connections."""
        self._transport.close()

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
        """A raw request on the same transport (``Transport.request``), for callers that decode themselves."""
        return await self._transport.request(
            method, path, query=query, body=body, content_type=content_type, action=action
        )

    async def get(
        self, res: type[R], name: str, *, namespace: str | None = None, action: str | None = None
    ) -> R:
        """The named object."""
        path = resource_path(res, name, namespace=_scope(res, namespace))
        action = action or f"get {res.__name__} {_where(name, namespace)}"
        response = await self._transport.request("GET", path, action=action)
        decoded: R = decode_object(response.body, res)
        return decoded

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
        """One page of a LIST (``limit`` objects at most, from ``continue_token``) and its resourceVersion."""
        query = {"labelSelector": selector(labels), "fieldSelector": selector(fields)}
        if limit:
            query["limit"] = str(limit)
        if continue_token:
            query["continue"] = continue_token
        response = await self._transport.request(
            "GET",
            resource_path(res, namespace=_scope(res, namespace)),
            query={k: v for k, v in query.items() if v},
            action=action or f"list {res.__name__}",
        )
        cont, version, items = decode_list(response.body, res)
        return ListPage(items=items, resource_version=version or "", continue_token=cont or None)

    async def list(
        self,
        res: type[R],
        *,
        namespace: str | None = None,
        labels: Selector | None = None,
        fields: Selector | None = None,
        chunk_size: int = 500,
        action: str | None = None,
    ) -> AsyncIterator[R]:
        """Every matching object, page after page (``namespace=ALL_NAMESPACES`` or None: all of them)."""
        token: str | None = None
        while True:
            page = await self.list_page(
                res,
                namespace=namespace,
                labels=labels,
                fields=fields,
                limit=chunk_size,
                continue_token=token,
                action=action,
            )
            for item in page.items:
                yield item
            if not page.continue_token:
                return
            token = page.continue_token

    async def create(self, obj: R, *, namespace: str | None = None, action: str | None = None) -> R:
        """Create ``obj`` (in ``namespace``, default its own); the object as stored."""
        res = type(obj)
        ns = namespace or getattr(getattr(obj, "metadata", None), "namespace", None)
        response = await self._transport.request(
            "POST",
            resource_path(res, namespace=_scope(res, ns)),
            query={"fieldManager": self.field_manager},
            body=_body(obj),
            action=action or f"create {res.__name__}",
        )
        created: R = decode_object(response.body, res)
        return created

    async def replace(self, obj: R, *, namespace: str | None = None, action: str | None = None) -> R:
        """Update ``obj`` as a whole (guarded by its resourceVersion when it has one)."""
        res = type(obj)
        name, ns = _names(obj, namespace)
        response = await self._transport.request(
            "PUT",
            resource_path(res, name, namespace=_scope(res, ns)),
            query={"fieldManager": self.field_manager},
            body=_body(obj),
            action=action or f"update {res.__name__} {_where(name, ns)}",
        )
        replaced: R = decode_object(response.body, res)
        return replaced

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
        """Patch the named object (``patch``: a dict, list or model); ``PatchType.APPLY`` applies."""
        query = {"fieldManager": self.field_manager}
        if force:
            query["force"] = "true"
        response = await self._transport.request(
            "PATCH",
            resource_path(res, name, namespace=_scope(res, namespace)),
            query=query,
            body=_body(patch),
            content_type=patch_type.value,
            action=action or f"patch {res.__name__} {_where(name, namespace)}",
        )
        patched: R = decode_object(response.body, res)
        return patched

    async def apply(self, obj: R, *, namespace: str | None = None, force: bool = False) -> R:
        """Server-side apply ``obj`` as this client's field manager (JSON is YAML, so no YAML is written)."""
        name, ns = _names(obj, namespace)
        return await self.patch(
            type(obj),
            name,
            obj,
            namespace=ns,
            patch_type=PatchType.APPLY,
            force=force,
            action=f"apply {type(obj).__name__} {_where(name, ns)}",
        )

    async def delete(
        self,
        res: type[Any],
        name: str,
        *,
        namespace: str | None = None,
        grace_period: int | None = None,
        action: str | None = None,
    ) -> None:
        """Delete the named object (a 404 raises: callers decide whether gone is fine)."""
        await self._transport.request(
            "DELETE",
            resource_path(res, name, namespace=_scope(res, namespace)),
            query={"gracePeriodSeconds": str(grace_period)} if grace_period is not None else None,
            action=action or f"delete {res.__name__} {_where(name, namespace)}",
        )

    @asynccontextmanager
    async def watch(
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
    ) -> AsyncIterator[AsyncIterator[WatchEvent]]:
        """WATCH from ``resource_version``: events as they arrive, their objects left undecoded.

        The caller decodes each object (``decode``), so one malformed object need not end the stream;
        an ERROR event arrives as such. Leaving the block closes the stream.
        """
        query = {
            "watch": "true",
            "resourceVersion": resource_version,
            "labelSelector": selector(labels),
            "fieldSelector": selector(fields),
            "allowWatchBookmarks": "true" if bookmarks else "",
            "timeoutSeconds": str(timeout_seconds) if timeout_seconds else "",
        }
        async with self._transport.stream(
            resource_path(res, namespace=_scope(res, namespace)),
            query={k: v for k, v in query.items() if v},
            action=action or f"watch {res.__name__}",
            read_timeout=read_timeout,
        ) as lines:
            yield _events(lines)


async def _events(lines: AsyncIterator[bytes]) -> AsyncIterator[WatchEvent]:
    async for line in lines:
        yield msgspec.json.decode(line, type=WatchEvent)


def decode(event: WatchEvent, res: type[R]) -> R:
    """A watch event's object as ``res`` (raises ``msgspec.ValidationError`` if it is not one)."""
    decoded: R = decode_object(event.object, res)
    return decoded
