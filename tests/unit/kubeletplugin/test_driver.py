"""The driver: pu.lock per attempt, permanent vs retryable outcomes, error texts, metrics (docs/errors.md)."""

import asyncio
from pathlib import Path

from prometheus_client import REGISTRY

from imexdra.common.errors import ConfigError, PermanentError, RetryableError, RetryLaterError
from imexdra.common.files import flock
from imexdra.dra.driver import Device
from imexdra.dra.resourceclaim import ClaimRef, ResourceClaim, resource_claim
from imexdra.kubeletplugin.driver import ImexDriver
from imexdra.kubeletplugin.retries import RetryPolicy
from tests.support.waiting import eventually
from tests.unit.kubeletplugin.support import Node, channel_claim

FAST = RetryPolicy(budget=1.0, retry_base=0.01, retry_cap=0.02, bucket_rate=1000.0, bucket_burst=100)
DEVICE = Device(("channel",), "node-a", "channel-0", ())


class Scripted:
    """A stand-in for ``DeviceState`` answering from a per-UID list of outcomes (exception or devices)."""

    def __init__(self, script: dict[str, list[object]]) -> None:
        self.script = script
        self.calls: list[str] = []

    async def prepare(self, claim: ResourceClaim) -> tuple[Device, ...]:
        self.calls.append(claim.ref.uid)
        outcome = self.script[claim.ref.uid].pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return (DEVICE,)

    async def unprepare(self, ref: ClaimRef) -> None:
        self.calls.append(ref.uid)
        outcome = self.script[ref.uid].pop(0)
        if isinstance(outcome, Exception):
            raise outcome


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def claim(uid: str) -> ResourceClaim:
    return resource_claim(ClaimRef("ns", f"{uid}-name", uid), {"allocation": {}})


async def test_permanent_error_ends_the_claim_with_upstreams_text(tmp_path: Path) -> None:
    """A permanent error is returned once, as 'error preparing devices for claim '<ns>/<name>:<uid>': ...'."""
    state = Scripted({"u1": [PermanentError("no clique")]})
    results = await ImexDriver(state, tmp_path / "pu.lock", policy=FAST).prepare([claim("u1")])
    assert str(results["u1"].error) == "error preparing devices for claim 'ns/u1-name:u1': no clique"
    assert state.calls == ["u1"]


async def test_retry_later_error_is_reported_at_once_for_the_kubelet_to_retry(tmp_path: Path) -> None:
    """A RetryLaterError (host IMEX not ready) is the claim's result at once, not retried in the call.

    The kubelet turns the result into a pod event naming the cause and retries on its next pod sync;
    that next call prepares the claim.
    """
    state = Scripted({"u1": [RetryLaterError("host IMEX not ready"), "ok"]})
    driver = ImexDriver(state, tmp_path / "pu.lock", policy=FAST)
    first = await driver.prepare([claim("u1")])
    assert str(first["u1"].error) == "error preparing devices for claim 'ns/u1-name:u1': host IMEX not ready"
    assert state.calls == ["u1"]
    second = await driver.prepare([claim("u1")])
    assert second["u1"].error is None and second["u1"].devices == (DEVICE,)


async def test_retryable_error_is_retried_until_success(tmp_path: Path) -> None:
    """Retryable errors are retried inside the call; the kubelet only sees the success."""
    state = Scripted({"u1": [RetryableError("not ready"), RetryableError("not ready"), "ok"]})
    results = await ImexDriver(state, tmp_path / "pu.lock", policy=FAST).prepare([claim("u1")])
    assert results["u1"].error is None
    assert results["u1"].devices == (DEVICE,)
    assert state.calls == ["u1", "u1", "u1"]


async def test_unknown_exceptions_are_retried(tmp_path: Path) -> None:
    """A bug-shaped exception is not a reason to fail the pod for good: it is retried."""
    state = Scripted({"u1": [KeyError("x"), "ok"]})
    results = await ImexDriver(state, tmp_path / "pu.lock", policy=FAST).prepare([claim("u1")])
    assert results["u1"].error is None


async def test_claim_still_failing_at_the_budget_is_left_out(tmp_path: Path) -> None:
    """The budget ends with the claim absent, which the kubelet reports as 'left out'."""
    state = Scripted({"u1": [RetryableError("never")] * 1000, "u2": ["ok"]})
    driver = ImexDriver(
        state, tmp_path / "pu.lock", policy=RetryPolicy(budget=0.2, retry_base=0.01, retry_cap=0.01)
    )
    results = await driver.prepare([claim("u1"), claim("u2")])
    assert set(results) == {"u2"}


async def test_lock_held_elsewhere_is_retried_and_counted(tmp_path: Path) -> None:
    """pu.lock held by another process: the attempt times out, is counted, and retried after release."""
    lock = tmp_path / "pu.lock"
    state = Scripted({"u1": ["ok"]})
    driver = ImexDriver(
        state, lock, policy=RetryPolicy(budget=5.0, retry_base=0.01, retry_cap=0.01), lock_timeout=0.05
    )

    def lock_timeouts() -> float:
        return sample(
            "nvidia_dra_node_prepare_errors_total",
            driver="compute-domain.nvidia.com",
            error_type="lock_acquire",
        )

    before = lock_timeouts()
    taken, release = asyncio.Event(), asyncio.Event()

    async def holder() -> None:
        async with flock.hold(lock):
            taken.set()
            await release.wait()

    held = asyncio.create_task(holder())
    await asyncio.wait_for(taken.wait(), 5)
    preparing = asyncio.create_task(driver.prepare([claim("u1")]))
    await eventually("a lock timeout counted", lambda: lock_timeouts() > before, within=5, interval=0.01)
    assert not preparing.done()
    release.set()
    results = await preparing
    await held
    assert results["u1"].error is None


async def test_unprepare_outcomes(tmp_path: Path) -> None:
    """Unprepare: success is an empty error, permanent errors use upstream's 'error unpreparing' text."""
    state = Scripted({"ok": [None], "bad": [ConfigError("broken", field="domainID")]})
    results = await ImexDriver(state, tmp_path / "pu.lock", policy=FAST).unprepare(
        [ClaimRef("ns", "ok-name", "ok"), ClaimRef("ns", "bad-name", "bad")]
    )
    assert results["ok"].error is None
    assert (
        str(results["bad"].error) == "error unpreparing devices for claim 'ns/bad-name:bad': domainID: broken"
    )


async def test_request_metrics(tmp_path: Path) -> None:
    """A fully successful call counts as a request; in-flight returns to zero."""
    labels = {"driver": "compute-domain.nvidia.com", "operation": "prepare"}
    before = sample("nvidia_dra_requests_total", **labels)
    await ImexDriver(Scripted({"u1": ["ok"]}), tmp_path / "pu.lock", policy=FAST).prepare([claim("u1")])
    assert sample("nvidia_dra_requests_total", **labels) == before + 1
    assert sample("nvidia_dra_requests_inflight", **labels) == 0
    assert sample("nvidia_dra_request_duration_seconds_count", **labels) >= 1


async def test_driver_over_real_state_prepares_once_and_reports_twice(tmp_path: Path) -> None:
    """End to end over real files: two calls for one claim give the same devices (idempotent)."""
    node = Node(tmp_path)
    await node.initialize()
    driver = ImexDriver(node.state, node.paths.prepare_lock, policy=FAST)
    first = await driver.prepare([channel_claim()])
    second = await driver.prepare([channel_claim()])
    assert first["claim-1"].devices == second["claim-1"].devices
    assert first["claim-1"].devices[0].cdi_device_ids == (
        "k8s.compute-domain.nvidia.com/claim=claim-1-channel-0",
    )
    assert node.paths.prepare_lock.exists()
