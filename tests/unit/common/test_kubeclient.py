"""The typed client on the lean transport: URLs, bodies, field manager, paging, apply, watch, error names.

A local HTTP server answers each request from a queue of canned replies and records what it was sent.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import msgspec
import pytest
from lightkube.config.kubeconfig import SingleConfig
from lightkube.config.models import Cluster, Context, User
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap, Node
from lightkube.types import PatchType

from imexdra.common.kube.api import ALL_NAMESPACES, KubeApi
from imexdra.common.kube.client import PermanentApiError, kube_errors
from imexdra.common.kube.kubeclient import KubeClient, decode
from imexdra.common.kube.transport import Transport


@dataclass
class Api:
    """Pops one reply per request; keeps (request line, headers and body) of each."""

    replies: list[tuple[int, bytes, bool]] = field(default_factory=list)  # status, body, chunked
    seen: list[tuple[str, bytes, bytes]] = field(default_factory=list)
    port: int = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while self.replies:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                break
            length = next(
                (
                    int(h.split(b":")[1])
                    for h in head.split(b"\r\n")
                    if h.lower().startswith(b"content-length")
                ),
                0,
            )
            body = await reader.readexactly(length)
            self.seen.append((head.split(b"\r\n")[0].decode(), head, body))
            status, answer, chunked = self.replies.pop(0)
            if chunked:
                framed = (
                    b"".join(b"%x\r\n%s\r\n" % (len(line), line) for line in answer.split(b"|"))
                    + b"0\r\n\r\n"
                )
                writer.write(b"HTTP/1.1 %d X\r\nTransfer-Encoding: chunked\r\n\r\n%s" % (status, framed))
            else:
                writer.write(b"HTTP/1.1 %d X\r\nContent-Length: %d\r\n\r\n%s" % (status, len(answer), answer))
            await writer.drain()
        writer.close()


@pytest.fixture
async def api() -> AsyncIterator[Api]:
    served = Api()
    listener = await asyncio.start_server(served.handle, "127.0.0.1", 0)
    served.port = listener.sockets[0].getsockname()[1]
    yield served
    listener.close()


def client(api: Api) -> KubeClient:
    config = SingleConfig(
        context_name="t",
        context=Context(cluster="c"),
        cluster=Cluster(server=f"http://127.0.0.1:{api.port}"),
        user=User(token="t"),
    )
    return KubeClient(Transport(config), field_manager="imexdra-test")


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


async def test_get_decodes_into_the_resource_class(api: Api) -> None:
    """GET of a namespaced object: the object's URL, decoded as the lightkube class."""
    api.replies = [(200, cm("a", x="1"), False)]
    got = await client(api).get(ConfigMap, "a", namespace="ns")
    assert isinstance(got, ConfigMap) and got.data == {"x": "1"}
    assert api.seen[0][0] == "GET /api/v1/namespaces/ns/configmaps/a HTTP/1.1"


async def test_list_follows_continue_tokens_with_selectors(api: Api) -> None:
    """LIST pages are followed to the end; selectors, limit and continue go in the query."""
    page1 = b'{"metadata":{"continue":"k1","resourceVersion":"5"},"items":[' + cm("a") + b"]}"
    page2 = b'{"metadata":{"resourceVersion":"5"},"items":[' + cm("b") + b"]}"
    api.replies = [(200, page1, False), (200, page2, False)]
    names = [
        item.metadata.name
        async for item in client(api).list(
            ConfigMap, namespace=ALL_NAMESPACES, labels={"team": "x", "on": None}, fields="a=b", chunk_size=1
        )
        if item.metadata is not None
    ]
    assert names == ["a", "b"]
    assert api.seen[0][0] == (
        "GET /api/v1/configmaps?labelSelector=team%3Dx%2Con&fieldSelector=a%3Db&limit=1 HTTP/1.1"
    )
    assert "continue=k1" in api.seen[1][0]


async def test_writes_carry_the_field_manager_kind_and_patch_type(api: Api) -> None:
    """create, replace, merge patch and server-side apply: method, URL, content type, body."""
    api.replies = [(201, cm("a"), False), (200, cm("a"), False), (200, cm("a"), False), (200, cm("a"), False)]
    kube = client(api)
    new = ConfigMap(metadata=ObjectMeta(name="a", namespace="ns"), data={"k": "v"})
    await kube.create(new)
    await kube.replace(new)
    await kube.patch(ConfigMap, "a", {"data": {"k": "w"}}, namespace="ns", patch_type=PatchType.MERGE)
    await kube.apply(new, force=True)
    lines = [line for line, _, _ in api.seen]
    assert lines == [
        "POST /api/v1/namespaces/ns/configmaps?fieldManager=imexdra-test HTTP/1.1",
        "PUT /api/v1/namespaces/ns/configmaps/a?fieldManager=imexdra-test HTTP/1.1",
        "PATCH /api/v1/namespaces/ns/configmaps/a?fieldManager=imexdra-test HTTP/1.1",
        "PATCH /api/v1/namespaces/ns/configmaps/a?fieldManager=imexdra-test&force=true HTTP/1.1",
    ]
    assert msgspec.json.decode(api.seen[0][2])["kind"] == "ConfigMap"  # filled in from the class
    assert b"Content-Type: application/merge-patch+json" in api.seen[2][1]
    assert b"Content-Type: application/apply-patch+yaml" in api.seen[3][1]


async def test_watch_yields_events_and_decodes_objects(api: Api) -> None:
    """WATCH: the query asks for bookmarks from a resourceVersion; each line is an event."""
    added = b'{"type":"ADDED","object":' + cm("a") + b"}\n"
    bookmark = b'{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"9"}}}\n'
    api.replies = [(200, added + b"|" + bookmark, True)]
    async with client(api).watch(
        ConfigMap, namespace="ns", resource_version="7", timeout_seconds=60
    ) as events:
        seen = [event async for event in events]
    assert [event.type for event in seen] == ["ADDED", "BOOKMARK"]
    obj = decode(seen[0], ConfigMap)
    assert obj.metadata is not None and obj.metadata.name == "a"
    assert api.seen[0][0] == (
        "GET /api/v1/namespaces/ns/configmaps?watch=true&resourceVersion=7"
        "&allowWatchBookmarks=true&timeoutSeconds=60 HTTP/1.1"
    )


async def test_errors_are_named_by_verb_kind_and_object_or_by_the_caller(api: Api) -> None:
    """A 404 names the call (``delete Node n1``); inside ``kube_errors`` it takes the caller's words."""
    status = b'{"kind":"Status","reason":"NotFound","message":"nodes \\"n1\\" not found","code":404}'
    api.replies = [(404, status, False), (404, status, False)]
    kube = client(api)
    with pytest.raises(PermanentApiError) as raised:
        await kube.delete(Node, "n1")
    assert str(raised.value) == 'delete Node n1: 404 NotFound: nodes "n1" not found'
    with pytest.raises(PermanentApiError) as renamed, kube_errors("remove node n1"):
        await kube.delete(Node, "n1")
    assert str(renamed.value) == 'remove node n1: 404 NotFound: nodes "n1" not found'
    assert renamed.value.code == 404
    assert api.seen[0][0] == "DELETE /api/v1/nodes/n1 HTTP/1.1"
