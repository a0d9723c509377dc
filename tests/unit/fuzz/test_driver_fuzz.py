"""Fuzzing the kubelet-facing calls: empty, duplicated, odd and huge NodePrepare/Unprepare requests.

The real ``DraService`` over the real ``ImexDriver`` (real ``pu.lock``), with a scripted
stand-in ``DeviceState`` whose per-claim outcomes are drawn too: success, a permanent error, or a few
retryable/untyped failures before one of those. The claim getter answers, fails, or returns a
replaced, unallocated or oddly shaped claim. Whatever the request, a call returns or raises
``RequestError``; a whole-call failure happens exactly when a claim could not be read (missing,
replaced, unallocated); otherwise every requested UID gets exactly one entry, with an error exactly
when the claim was malformed or its outcome was permanent.
The huge batch goes through the real gRPC servers on unix sockets, v1 and v1beta1.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import grpc
from hypothesis import example, given
from hypothesis import strategies as st

from imexdra.common.errors import PermanentError, RetryableError
from imexdra.dra._pb import dra_v1_pb2 as v1
from imexdra.dra._pb import dra_v1beta1_pb2 as v1beta1
from imexdra.dra.driver import Device
from imexdra.dra.nodeservice import DraService, RequestError
from imexdra.dra.resourceclaim import ClaimRef, ResourceClaim
from imexdra.dra.server import KubeletPluginServer
from imexdra.kubeletplugin.driver import ImexDriver
from imexdra.kubeletplugin.paths import PluginPaths
from imexdra.kubeletplugin.retries import RetryPolicy
from tests.support.grpcio_client import dra_v1_stub, dra_v1beta1_stub
from tests.unit.dra.server_fakes import ALLOCATED, ApiClaims
from tests.unit.fuzz.profiles import fuzz

#: No waiting between attempts, and a budget no scripted claim can exhaust.
NO_WAIT = RetryPolicy(budget=60.0, retry_base=0.0, retry_cap=0.0, bucket_rate=1e9, bucket_burst=10**9)
DEVICE = Device(("channel/sub",), "node-a", "channel-0", ("k8s.compute-domain.nvidia.com/claim=x-channel-0",))
FAILURES = {"retryable": RetryableError("not ready"), "untyped": KeyError("bug"), "lookup": LookupError("x")}


class OutcomePreparer:
    """A stand-in ``DeviceState``: per UID, a few failures, then success or a permanent error."""

    def __init__(self, failures: Mapping[str, list[str]], permanent: set[str]) -> None:
        self.failures = {uid: list(kinds) for uid, kinds in failures.items()}
        self.permanent = permanent

    async def prepare(self, claim: ResourceClaim) -> tuple[Device, ...]:
        self._outcome(claim.ref.uid)
        return (DEVICE,)

    async def unprepare(self, ref: ClaimRef) -> None:
        self._outcome(ref.uid)

    def _outcome(self, uid: str) -> None:
        pending = self.failures.get(uid)
        if pending:
            raise FAILURES[pending.pop(0)]
        if uid in self.permanent:
            raise PermanentError(f"no way for {uid}")


names = st.sampled_from(["c1", "c2", "c3"]) | st.text(max_size=8)
uids = st.sampled_from(["u1", "u2", "u3", ""]) | st.text(max_size=8)
claims = st.lists(st.tuples(names, names, uids), max_size=8)
API_ANSWERS = ["ok", "ok", "ok", "missing", "replaced", "unallocated", "status-is-a-list", "metadata-is-text"]


MALFORMED = {"status-is-a-list", "metadata-is-text"}


def api_object(answer: str, namespace: str, name: str, uid: str) -> dict[str, Any] | None:
    """What the API server holds for a claim, per the drawn answer (None: no such claim)."""
    meta = {"namespace": namespace, "name": name, "uid": uid}
    return {
        "ok": {"metadata": meta, "status": ALLOCATED},
        "missing": None,
        "replaced": {"metadata": {**meta, "uid": uid + "-new"}, "status": ALLOCATED},
        "unallocated": {"metadata": meta, "status": {}},
        "status-is-a-list": {"metadata": meta, "status": ["allocation"]},
        "metadata-is-text": {"metadata": "uid", "status": ALLOCATED},
    }[answer]


@fuzz(ci=100, soak=8_000)
@given(
    requested=claims,
    answers=st.lists(st.sampled_from(API_ANSWERS), min_size=8, max_size=8),
    failures=st.dictionaries(uids, st.lists(st.sampled_from(sorted(FAILURES)), max_size=3), max_size=4),
    permanent=st.sets(uids, max_size=3),
)
@example(requested=[], answers=["ok"] * 8, failures={}, permanent=set())
@example(
    requested=[("ns", "c1", "u1")] * 3, answers=["ok"] * 8, failures={"u1": ["untyped"]}, permanent=set()
)
def test_prepare_and_unprepare_requests(
    requested: list[tuple[str, str, str]],
    answers: list[str],
    failures: dict[str, list[str]],
    permanent: set[str],
) -> None:
    """Any request: one entry per UID (errors for malformed claims, permanent outcomes), or RequestError."""
    api = ApiClaims()
    drawn: dict[tuple[str, str], str] = {}
    for (namespace, name, uid), answer in zip(requested, answers, strict=False):
        obj = api_object(answer, namespace, name, uid)
        if obj is not None and (namespace, name) not in api.objects:
            api.objects[(namespace, name)] = obj
            drawn[(namespace, name)] = answer
    ok = {"metadata": {"namespace": "", "name": "", "uid": ""}, "status": ALLOCATED}
    malformed = {uid for namespace, name, uid in requested if drawn.get((namespace, name)) in MALFORMED}
    readable = all(
        drawn.get((namespace, name)) in MALFORMED
        or api.objects.get((namespace, name))
        == {**ok, "metadata": {"namespace": namespace, "name": name, "uid": uid}}
        for namespace, name, uid in requested
    )
    wanted = {uid for _, _, uid in requested}

    async def scenario(lock: Path) -> None:
        service = DraService(ImexDriver(OutcomePreparer(failures, permanent), lock, policy=NO_WAIT), api)
        request = v1.NodePrepareResourcesRequest(claims=[_claim(*c) for c in requested])
        try:
            prepared = await service.prepare(request)
        except RequestError:
            assert requested and not readable
        else:
            assert readable or not requested
            assert set(prepared.claims) == wanted
            for uid, entry in prepared.claims.items():
                failed = uid in permanent or uid in malformed
                assert bool(entry.error) == failed
                assert len(entry.devices) == (0 if failed else 1)
        unprepare = v1.NodeUnprepareResourcesRequest(claims=[_claim(*c) for c in requested])
        unprepared = await service.unprepare(unprepare)
        assert set(unprepared.claims) == wanted
        assert {uid for uid, entry in unprepared.claims.items() if entry.error} == wanted & permanent

    with tempfile.TemporaryDirectory(prefix="fuzz-driver-") as directory:
        asyncio.run(scenario(Path(directory, "pu.lock")))


def _claim(namespace: str, name: str, uid: str) -> v1.Claim:
    return v1.Claim(namespace=namespace, name=name, uid=uid)


HUGE = 5000


async def test_huge_batches_over_grpc_get_an_answer_for_every_claim() -> None:
    """5000 claims (and each one twice) in one call, v1 and v1beta1: an entry per claim, none lost."""
    api = ApiClaims()
    for index in range(HUGE):
        api.add("default", f"claim-{index}", f"uid-{index}")
    refs = [{"namespace": "default", "name": f"claim-{i}", "uid": f"uid-{i}"} for i in range(HUGE)]
    permanent = {f"uid-{i}" for i in range(0, HUGE, 7)}
    with tempfile.TemporaryDirectory(prefix="kp", dir="/tmp") as short:  # unix socket paths are short
        (Path(short) / "registry").mkdir()
        paths = PluginPaths(plugins_dir=Path(short, "plugins"), registrar_dir=Path(short, "registry"))
        driver = ImexDriver(OutcomePreparer({}, permanent), Path(short, "pu.lock"), policy=NO_WAIT)
        async with (
            KubeletPluginServer(driver=driver, get_claim=api, paths=paths),
            grpc.aio.insecure_channel(f"unix://{paths.dra_socket}") as channel,
        ):
            stub = dra_v1_stub(channel)
            prepared = await stub.NodePrepareResources(v1.NodePrepareResourcesRequest(claims=refs + refs))
            beta_stub = dra_v1beta1_stub(channel)
            beta = await beta_stub.NodePrepareResources(v1beta1.NodePrepareResourcesRequest(claims=refs))
            unprepared = await stub.NodeUnprepareResources(v1.NodeUnprepareResourcesRequest(claims=refs))
    every = {f"uid-{i}" for i in range(HUGE)}
    for response in (prepared, beta, unprepared):
        assert set(response.claims) == every
        assert {uid for uid, entry in response.claims.items() if entry.error} == permanent
    assert all(
        list(prepared.claims[uid].devices[0].request_names) == ["channel"] for uid in every - permanent
    )
