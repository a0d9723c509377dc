"""The typed client on the lean transport: URLs, bodies, field manager, paging, apply, watch, error names.

A scripted local HTTP server (tests/support/httpscript.py) answers each request and records it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import msgspec
import pytest

from imexdra.common.kube.api import ALL_NAMESPACES, KubeApi, PatchType
from imexdra.common.kube.client import PermanentApiError, kube_errors
from imexdra.common.kube.kubeclient import KubeClient, decode
from imexdra.common.kube.kubeconfig import User
from imexdra.common.kube.models.core_v1 import ConfigMap, Node
from imexdra.common.kube.models.meta_v1 import ObjectMeta
from imexdra.common.kube.transport import Transport
from tests.support.httpscript import ScriptedServer, chunked, reply, serving


@pytest.fixture
async def api() -> AsyncIterator[ScriptedServer]:
    served = ScriptedServer()
    async with serving(served.handle) as served.port:
        yield served


def client(api: ScriptedServer) -> KubeClient:
    return KubeClient(Transport(api.kubeconfig(User(token="t"))), field_manager="imexdra-test")


def cm(name: str, namespace: str = "ns", **data: str) -> bytes:
    return msgspec.json.encode(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace},
            "data": data,
        }
    )


def test_kube_client_satisfies_the_protocol() -> None:
    """``KubeClient`` is a ``KubeApi`` (the seam components are typed against)."""

    def accepts(_: KubeApi) -> None:
        pass

    accepts(KubeClient.__new__(KubeClient))


async def test_get_decodes_into_the_resource_class(api: ScriptedServer) -> None:
    """GET of a namespaced object: the object's URL, decoded as the kind's class."""
    api.replies = [reply(200, cm("a", x="1"))]
    got = await client(api).get(ConfigMap, "a", namespace="ns")
    assert isinstance(got, ConfigMap) and got.data == {"x": "1"}
    assert api.request_line(0) == "GET /api/v1/namespaces/ns/configmaps/a HTTP/1.1"


async def test_list_follows_continue_tokens_with_selectors(api: ScriptedServer) -> None:
    """LIST pages are followed to the end; selectors, limit and continue go in the query."""
    page1 = b'{"metadata":{"continue":"k1","resourceVersion":"5"},"items":[' + cm("a") + b"]}"
    page2 = b'{"metadata":{"resourceVersion":"5"},"items":[' + cm("b") + b"]}"
    api.replies = [reply(200, page1), reply(200, page2)]
    names = [
        item.metadata.name
        async for item in client(api).list(
            ConfigMap, namespace=ALL_NAMESPACES, labels={"team": "x", "on": None}, fields="a=b", chunk_size=1
        )
        if item.metadata is not None
    ]
    assert names == ["a", "b"]
    assert api.request_line(0) == (
        "GET /api/v1/configmaps?labelSelector=team%3Dx%2Con&fieldSelector=a%3Db&limit=1 HTTP/1.1"
    )
    assert "continue=k1" in api.request_line(1)


async def test_writes_carry_the_field_manager_kind_and_patch_type(api: ScriptedServer) -> None:
    """create, replace, merge patch and server-side apply: method, URL, content type, body."""
    api.replies = [reply(201, cm("a")), *(reply(200, cm("a")) for _ in range(3))]
    kube = client(api)
    new = ConfigMap(metadata=ObjectMeta(name="a", namespace="ns"), data={"k": "v"})
    await kube.create(new)
    await kube.replace(new)
    await kube.patch(ConfigMap, "a", {"data": {"k": "w"}}, namespace="ns", patch_type=PatchType.MERGE)
    await kube.apply(new, force=True)
    lines = [api.request_line(i) for i in range(len(api.requests))]
    assert lines == [
        "POST /api/v1/namespaces/ns/configmaps?fieldManager=imexdra-test HTTP/1.1",
        "PUT /api/v1/namespaces/ns/configmaps/a?fieldManager=imexdra-test HTTP/1.1",
        "PATCH /api/v1/namespaces/ns/configmaps/a?fieldManager=imexdra-test HTTP/1.1",
        "PATCH /api/v1/namespaces/ns/configmaps/a?fieldManager=imexdra-test&force=true HTTP/1.1",
    ]
    assert msgspec.json.decode(api.body(0))["kind"] == "ConfigMap"  # filled in from the class
    assert b"Content-Type: application/merge-patch+json" in api.requests[2]
    assert b"Content-Type: application/apply-patch+yaml" in api.requests[3]


async def test_watch_yields_events_and_decodes_objects(api: ScriptedServer) -> None:
    """WATCH: the query asks for bookmarks from a resourceVersion; each line is an event."""
    added = b'{"type":"ADDED","object":' + cm("a") + b"}\n"
    bookmark = b'{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"9"}}}\n'
    api.replies = [chunked(added, bookmark)]
    async with client(api).watch(
        ConfigMap, namespace="ns", resource_version="7", timeout_seconds=60
    ) as events:
        seen = [event async for event in events]
    assert [event.type for event in seen] == ["ADDED", "BOOKMARK"]
    obj = decode(seen[0], ConfigMap)
    assert obj.metadata is not None and obj.metadata.name == "a"
    assert api.request_line(0) == (
        "GET /api/v1/namespaces/ns/configmaps?watch=true&resourceVersion=7"
        "&allowWatchBookmarks=true&timeoutSeconds=60 HTTP/1.1"
    )


async def test_errors_are_named_by_verb_kind_and_object_or_by_the_caller(api: ScriptedServer) -> None:
    """A 404 names the call (``delete Node n1``); inside ``kube_errors`` it takes the caller's words."""
    status = b'{"kind":"Status","reason":"NotFound","message":"nodes \\"n1\\" not found","code":404}'
    api.replies = [reply(404, status), reply(404, status)]
    kube = client(api)
    with pytest.raises(PermanentApiError) as raised:
        await kube.delete(Node, "n1")
    assert str(raised.value) == 'delete Node n1: 404 NotFound: nodes "n1" not found'
    with pytest.raises(PermanentApiError) as renamed, kube_errors("remove node n1"):
        await kube.delete(Node, "n1")
    assert str(renamed.value) == 'remove node n1: 404 NotFound: nodes "n1" not found'
    assert renamed.value.code == 404
    assert api.request_line(0) == "DELETE /api/v1/nodes/n1 HTTP/1.1"
