"""Every API write the controller makes, shaped so that none of them can lose a race into a 409.

- Creates are only issued after the overlay (``overlay.Overlay``) shows no such object, so they never
  hit AlreadyExists in the normal flow.
- Metadata edits of objects other components also write (DaemonSet status by the DaemonSet controller,
  node status by kubelets, user edits) are JSON patches guarded by a ``test`` of the exact value being
  changed instead of by resourceVersion, so unrelated writes cannot make them fail.
- Objects the controller alone writes (ComputeDomain status, cliques) are merge-patched.
- The finalizer is added to a ComputeDomain guarded by its resourceVersion, as upstream's Update is.
- A node label set for a binding (``binding``) is guarded by the node's resourceVersion: the label
  must not replace another domain's that appeared meanwhile.
- Binding conditions are appended to a claim's ``status.devices`` by a JSON patch guarded by the
  claim's resourceVersion: those entries are ours, the rest of the status is the scheduler's.

Writes go through the component's client (``KubeApi.request``); each is counted in
``imexdra_controller_api_writes_total`` and its result recorded in the overlay. A 401 or 403 is retried
here although the client calls it permanent (``authorization_retried``).
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import msgspec
import structlog
from prometheus_client import Counter

from imexdra.api.computedomain import ComputeDomain, ComputeDomainStatus
from imexdra.api.constants import COMPUTE_DOMAIN_FINALIZER, DRIVER_NAME, NODE_LABEL_KEY
from imexdra.common.errors import RetryableError
from imexdra.common.kube.api import KubeApi
from imexdra.common.kube.client import ApiStatusError, RetryableApiError, is_not_found, status_code
from imexdra.common.kube.models.core_v1 import Node
from imexdra.common.kube.models.resource_v1 import ResourceClaim
from imexdra.common.kube.resource import decode_object
from imexdra.common.kube.transport import resource_path
from imexdra.common.machinery.store import KubeObject, object_key
from imexdra.controller.claimholds import PendingBinding
from imexdra.controller.config import CONTROLLER_NAME
from imexdra.controller.metrics import API_WRITES
from imexdra.controller.overlay import Overlay

R = TypeVar("R", bound=KubeObject)

_log = structlog.get_logger(__name__)

_MERGE = "application/merge-patch+json"
_JSON_PATCH = "application/json-patch+json"
_FIELD_MANAGER = {"fieldManager": CONTROLLER_NAME}


def has_finalizer(obj: KubeObject) -> bool:
    """Whether ``obj`` carries the ``resource.nvidia.com/computeDomain`` finalizer."""
    return obj.metadata is not None and COMPUTE_DOMAIN_FINALIZER in (obj.metadata.finalizers or [])


#: Authentication and authorization failures: retried by the controller (docs/errors.md §2).
_AUTH_CODES = frozenset({401, 403})


def authorization_retried(error: ApiStatusError) -> ApiStatusError:
    """``error``, retryable when it is a 401 or 403: the controller's writes retry them.

    Authorization changes without an event that would bring a domain back to the queue: a
    kube-apiserver that has just restarted answers 403 until its RBAC caches are filled
    (test_control_plane_faults), RBAC may be applied after the controller started, a token rotates.
    Upstream's controller requeues every error. The daemon and the kubelet plugin keep the client's
    model (a forbidden patch is a refusal, not a transient), so this lives here, not in the client.
    """
    if error.code in _AUTH_CODES and not isinstance(error, RetryableError):
        return RetryableApiError(
            str(error),
            code=error.code,
            reason=error.reason,
            retry_after=error.retry_after,
            action=error.action,
        )
    return error


@contextmanager
def _authorization_retried() -> Iterator[None]:
    try:
        yield
    except ApiStatusError as error:
        retried = authorization_retried(error)
        if retried is error:
            raise
        raise retried from error


class FinalizersChangedError(RetryableError):
    """The finalizer list changed between our read and our patch (the patch's test failed)."""


class NodeChangedError(RetryableError):
    """The node changed between our read and our label patch (409): read it again."""


@functools.cache
def _counter(resource: str, verb: str, code: str) -> Counter:
    return API_WRITES.labels(resource=resource, verb=verb, code=code)  # looked up once per combination


def _pointer(token: str) -> str:
    """Escape a JSON pointer segment (RFC 6901)."""
    return token.replace("~", "~0").replace("/", "~1")


def _names(obj: KubeObject) -> tuple[str, str | None]:
    if obj.metadata is None or not obj.metadata.name:
        raise ValueError("object has no name")
    return obj.metadata.name, obj.metadata.namespace


class Writer:
    """Writes through the component's client, counting each call by resource, verb and status code."""

    def __init__(self, client: KubeApi) -> None:
        self._client = client

    async def _send(
        self, resource: str, verb: str, method: str, path: str, body: Any = None, content_type: str = ""
    ) -> bytes:
        with _authorization_retried():
            try:
                response = await self._client.request(
                    method,
                    path,
                    query=_FIELD_MANAGER if method != "DELETE" else None,
                    body=body,
                    content_type=content_type or "application/json",
                )
            except ApiStatusError as error:
                _counter(resource, verb, str(status_code(error) or "error")).inc()
                raise
        _counter(resource, verb, "2xx").inc()
        return response.body

    async def create(self, obj: KubeObject, overlay: Overlay[R], *, cached_as: type[R] | None = None) -> R:
        """Create ``obj`` and record it, decoded as the overlay's type (``cached_as``; default: obj's)."""
        _, namespace = _names(obj)
        res = type(obj)
        body = await self._send(_plural(res), "create", "POST", resource_path(res, namespace=namespace), obj)
        decoded_as: type[Any] = cached_as or res
        created: R = decode_object(body, decoded_as)
        overlay.record(created)
        return created

    async def lookup(self, res: type[R], name: str, namespace: str | None) -> R | None:
        """The object as the API server has it now, or None; not a write, and not counted as one.

        A LIST with a ``metadata.name`` field selector rather than a GET, so the RBAC rules stay
        ``list``/``watch`` for reads. For the rare question the informers cannot answer yet: whose
        object did a create's 409 meet?
        """
        with _authorization_retried():
            response = await self._client.request(
                "GET",
                resource_path(res, namespace=namespace),
                query={"fieldSelector": f"metadata.name={name}"},
            )
        items = msgspec.json.decode(response.body, type=dict[str, Any]).get("items") or []
        if not items:
            return None
        found: R = decode_object(msgspec.json.encode(items[0]), res)
        return found

    async def delete(self, obj: R, overlay: Overlay[R], *, has_finalizers: bool = True) -> None:
        """Delete ``obj`` (already gone is fine) and record that it is going."""
        name, namespace = _names(obj)
        path = resource_path(type(obj), name, namespace=namespace)
        try:
            await self._send(_plural(type(obj)), "delete", "DELETE", path)
        except ApiStatusError as error:
            if not is_not_found(error):
                raise
        if has_finalizers:
            overlay.mark_deleting(obj)
        else:
            overlay.mark_gone(obj)

    async def _patch(self, obj: R, patch: Any, content_type: str, res: type[Any] | None = None) -> bytes:
        name, namespace = _names(obj)
        target = res or type(obj)
        path = resource_path(target, name, namespace=namespace)
        resource = _plural(target) + (
            "/status" if target in (ComputeDomain.Status, ResourceClaim.Status) else ""
        )
        return await self._send(resource, "patch", "PATCH", path, patch, content_type)

    async def add_finalizer(self, cd: ComputeDomain, overlay: Overlay[ComputeDomain]) -> ComputeDomain:
        """Add the domain finalizer (guarded by the domain's resourceVersion, as upstream's Update)."""
        assert cd.metadata is not None
        finalizers = [*(cd.metadata.finalizers or []), COMPUTE_DOMAIN_FINALIZER]
        patch = {"metadata": {"finalizers": finalizers, "resourceVersion": cd.metadata.resourceVersion}}
        patched: ComputeDomain = decode_object(await self._patch(cd, patch, _MERGE), ComputeDomain)
        overlay.record(patched)
        return patched

    async def remove_finalizer(self, obj: R, overlay: Overlay[R]) -> None:
        """Remove our finalizer, tested in place so concurrent writers to other fields cannot conflict."""
        assert obj.metadata is not None
        finalizers = obj.metadata.finalizers or []
        if COMPUTE_DOMAIN_FINALIZER not in finalizers:
            return
        path = f"/metadata/finalizers/{finalizers.index(COMPUTE_DOMAIN_FINALIZER)}"
        patch = [
            {"op": "test", "path": path, "value": COMPUTE_DOMAIN_FINALIZER},
            {"op": "remove", "path": path},
        ]
        try:
            body = await self._patch(obj, patch, _JSON_PATCH)
        except ApiStatusError as error:
            if status_code(error) == 422:  # the finalizers moved meanwhile: read again and retry
                raise FinalizersChangedError(f"finalizers of {object_key(obj)} changed; retrying") from error
            if not is_not_found(error):
                raise
            overlay.mark_gone(obj)
            return
        overlay.record(decode_object(body, type(obj)))

    async def write_status(
        self,
        cd: ComputeDomain,
        status: ComputeDomainStatus,
        overlay: Overlay[ComputeDomain],
        *,
        guarded: bool = False,
        clear_conditions: bool = False,
    ) -> ComputeDomain:
        """Replace the domain's status (the controller is its only writer; empty nodes are removed).

        ``channel`` and ``conditions`` are sent only when set, so a domain-isolation status is
        upstream's; ``clear_conditions`` removes the published conditions when ``status`` has none (a
        domain no longer held back by channel isolation's switch); ``guarded`` adds the domain's
        resourceVersion as a precondition (the write that records a new channel number must not land
        on a status it has not seen).
        """
        # A merge patch removes a key set to null: that is how an empty node list disappears.
        body: dict[str, Any] = {
            "status": status.status.value,
            "nodes": msgspec.to_builtins(status.nodes) or None,
        }
        if status.channel is not None:
            body["channel"] = status.channel
        if status.conditions:
            body["conditions"] = msgspec.to_builtins(status.conditions)
        elif clear_conditions:
            body["conditions"] = None
        patch: dict[str, Any] = {"status": body}
        if guarded:
            assert cd.metadata is not None
            patch["metadata"] = {"resourceVersion": cd.metadata.resourceVersion}
        answer = await self._patch(cd, patch, _MERGE, ComputeDomain.Status)
        updated: ComputeDomain = decode_object(answer, ComputeDomain)
        overlay.record(updated)
        return updated

    async def merge_patch(self, obj: R, patch: dict[str, Any], overlay: Overlay[R]) -> R:
        """Merge-patch an object the controller alone writes and record the result."""
        patched: R = decode_object(await self._patch(obj, patch, _MERGE), type(obj))
        overlay.record(patched)
        return patched

    async def remove_node_label(self, node: Node, uid: str, overlay: Overlay[Node]) -> None:
        """Remove the domain label from ``node`` if (and only if) it still names ``uid``."""
        path = f"/metadata/labels/{_pointer(NODE_LABEL_KEY)}"
        patch = [{"op": "test", "path": path, "value": uid}, {"op": "remove", "path": path}]
        try:
            await self._patch(node, patch, _JSON_PATCH)
        except ApiStatusError as error:
            # 404: node gone; 422: the test failed, i.e. the label changed meanwhile: nothing to remove.
            if status_code(error) not in (404, 422):
                raise
        overlay.mark_gone(node)  # it leaves the label-selected cache once the watch says so

    async def add_node_label(self, name: str, uid: str, overlay: Overlay[Node]) -> str | None:
        """Label node ``name`` for domain ``uid`` unless it carries a domain label already.

        Returns the label the node carries afterwards (``uid``, or another domain's), None if the node
        is gone. Guarded by the resourceVersion just read: a 409 is a ``NodeChangedError`` (retried).
        """
        node = await self.lookup(Node, name, None)
        if node is None or node.metadata is None:
            return None
        current: str | None = (node.metadata.labels or {}).get(NODE_LABEL_KEY)
        if current:
            return current
        patch = {
            "metadata": {"resourceVersion": node.metadata.resourceVersion, "labels": {NODE_LABEL_KEY: uid}}
        }
        try:
            body = await self._patch(node, patch, _MERGE)
        except ApiStatusError as error:
            if status_code(error) == 409:
                raise NodeChangedError(f"node {name} changed while labelling it; retrying") from error
            if is_not_found(error):
                return None
            raise
        overlay.record(decode_object(body, Node))
        return uid

    async def set_device_conditions(
        self,
        claim: KubeObject,
        binding: PendingBinding,
        *,
        condition: str,
        reason: str,
        message: str,
    ) -> bool:
        """Add ``status.devices`` entries with ``condition`` True for the claim's pending devices.

        A JSON patch guarded by the cached claim's resourceVersion: it appends our entries to what
        the status lists (or adds the list), and touches nothing else, so the allocation and the
        reservations, the scheduler's, stay as they are byte for byte (an apply re-encodes them, which
        the API server takes for a change needing ``resourceclaims/binding``). False when it did not
        land: the claim is gone (404), or changed since the cache saw it (422: the test failed; its
        watch event brings it back) or was refused (logged).
        """
        assert claim.metadata is not None
        stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        entry = {
            "type": condition,
            "status": "True",
            "reason": reason,
            "message": message,
            "lastTransitionTime": stamp,
        }
        statuses = [
            {"driver": DRIVER_NAME, "pool": pool, "device": device, "conditions": [entry]}
            for pool, device in binding.devices
        ]
        patch: list[dict[str, Any]] = [
            {"op": "test", "path": "/metadata/resourceVersion", "value": claim.metadata.resourceVersion}
        ]
        if binding.has_device_statuses:
            patch += [{"op": "add", "path": "/status/devices/-", "value": status} for status in statuses]
        else:
            patch.append({"op": "add", "path": "/status/devices", "value": statuses})
        try:
            await self._patch(claim, patch, _JSON_PATCH, ResourceClaim.Status)
        except ApiStatusError as error:
            if status_code(error) == 422:
                _log.info("Binding condition not written", claim=object_key(claim), error=str(error))
                return False
            if is_not_found(error):
                return False
            raise
        return True


def _plural(res: type[Any]) -> str:
    return resource_path(res).rsplit("/", 1)[1]
