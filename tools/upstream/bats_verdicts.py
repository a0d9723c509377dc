"""Why each of upstream's bats tests that does not pass on the simulated rack cannot, found by reading it.

``verdict(test)`` gives a test's verdict from its observed outcome: ``passed``; ``not-applicable``
or ``skipped`` with the reason below when the outcome is the one this table explains; otherwise
``unexplained`` (a failure nobody has looked at, or a test listed here that now passes: the table is
out of date). docs/upstream-tests.md renders the same table.
"""

from __future__ import annotations

from typing import Any, NamedTuple


class Known(NamedTuple):
    """An explained outcome: the one observed, the verdict it earns, and why."""

    outcome: str
    verdict: str
    reason: str


NA = "not-applicable"
DIFFERS = "differs-on-purpose"
INCOMPATIBLE = "incompatible"
NO_INTERNET = "this machine reaches no network outside the local cluster's fabric"
GO_SOURCE = (
    "greps klog headers for client-go's Go source file names (reflector.go, round_trippers.go); "
    "imexdra's headers name its Python modules (informer.py), the messages are client-go's"
)

# Test name (as bats prints it) -> its explained outcome.
KNOWN: dict[str, Known] = {
    "basics: GPU Operator installed": Known(
        "failed", NA, "wants NVIDIA's GPU Operator Helm release: the GPU side, which imexdra does not ship"
    ),
    "basics: SIGUSR2 handler: GPU plugin, CD plugin": Known(
        "failed",
        NA,
        "signals the GPU plugin's container `gpus` first (imexdra ships no GPU plugin); its CD half "
        "greps the Go function name main.RunPlugin, where imexdra's dump in the same file holds Python "
        "stacks (docs/compatibility.md §2.7). Tried by hand, the CD half also found that imexdra's "
        "image has no `kill` program (docs/upstream-tests.md §3)",
    ),
    "CDs: IMEX channel injection (all)": Known(
        "skipped",
        "skipped",
        "upstream skips charts older than its 25.8.0; imexdra's chart is 0.1.0. Upstream's own "
        "channel-injection-all.yaml gives channel0..channel2047 on the rack (docs/compatibility.md §2.12)",
    ),
    "CDs: daemon shutdown: confirm CD status cleanup": Known(
        "failed",
        DIFFERS,
        "the status cleanup it checks passes; then it greps the daemon's log for upstream's "
        "'Successfully removed daemon ... from ComputeDomain', the daemon deleting its own entry. "
        "imexdra's controller is the single writer and drops a terminating daemon (compatibility §3.1, §3.3)",
    ),
    "CDs: reject unknown field in opaque cfg in CD chan ResourceClaim": Known(
        "failed",
        DIFFERS,
        "its claim's domainID is 'not-needed-for-test': imexdra's tenant admission policy refuses the "
        "claim at create (domainID must be a ComputeDomain's UID, docs/tenancy.md), so the pod waits "
        "Pending for a claim that never exists instead of failing at prepare",
    ),
    "CDs: self-initiated unprepare of stale RCs in PrepareStarted": Known(
        "failed",
        DIFFERS,
        "the same claim, refused at admission; and imexdra checks a config before writing "
        "PrepareStarted (compatibility §3.2), so no partially prepared entry is left for the startup "
        "cleanup to report",
    ),
    "CDs: controller/plugin: startup config / detail in logs on level 0": Known(
        "failed",
        INCOMPATIBLE,
        "upstream logs its parsed flags as a go-spew dump ('klogVerbosity: (int) 0', "
        "'additionalNamespaces: ...'); imexdra logs the same values as klog key=value pairs "
        "('klogVerbosity=0', 'additionalNamespaces=[]'), so 'Verbosity:' is not found",
    ),
    "CDs: controller: test log verbosity levels": Known(
        "failed", NA, f"levels 0 and 1 and level 2's first check pass; then it {GO_SOURCE}"
    ),
    "CDs: daemon: test log verbosity levels": Known(
        "failed",
        DIFFERS,
        "wants upstream's level-1 'Wait for updated ComputeDomainDaemonInfo list', its daemon awaiting "
        "the entries it writes into the domain; imexdra's daemon writes none (single writer) and "
        "watches its clique. Its level-6 check is client-go's round_trippers.go",
    ),
    "CDs: nickelpie (NCCL send/recv/broadcast, 2 pods, 2 nodes, small payload)": Known(
        "failed", NA, f"clones its NCCL job from GitHub ({NO_INTERNET}) and needs real GPUs and NVLink"
    ),
    "CDs: nvbandwidth (2 nodes, 2 GPUs each)": Known(
        "failed",
        NA,
        "its result is nvbandwidth's measured multi-node memcpy over NVLink (real GPUs); the rack's image "
        "of that name is a stand-in that checks its channel only. Here the launcher never came: a worker "
        "found no free channel on a tray still held by an earlier failed test's pod",
    ),
    "CDs: downgrade: current-dev -> last-stable": Known(
        "failed",
        NA,
        f"installs upstream's own last release from registry.k8s.io ({NO_INTERNET}; its Go images could "
        "not run here either). imexdra's own up/downgrade: make upgrade-test (docs/registry.md §2)",
    ),
    "CDs: upgrade: wipe-state, install-last-stable, upgrade-to-current-dev": Known(
        "failed",
        NA,
        "installs upstream's last release from registry.k8s.io and applies its CRD from GitHub "
        f"({NO_INTERNET}); here it stopped earlier, deleting the CRD while earlier failed tests' "
        "ComputeDomains still held their finalizers",
    ),
}
FAILOVER = (
    "runs nvbandwidth on 4 GPUs per tray (image nvbandwidth-6dc12f17, not on the trays and not pullable: "
    f"{NO_INTERNET}) and checks its measured bandwidth across injected faults; its launcher never came"
)
for _name in (
    "CDs: failover nvb: force-delete worker pod 0",
    "CDs: failover nvb: force-delete all IMEX daemons",
    "CDs: failover nvb: regular-delete worker pod 1",
    "CDs: nvb many-iteration wrapper",
):
    KNOWN[_name] = Known("failed", NA, FAILOVER)


def verdict(test: dict[str, Any]) -> dict[str, str]:
    """``verdict`` and ``reason`` of one observed test (``name``, ``outcome``)."""
    known = KNOWN.get(test["name"])
    if known is None:
        if test["outcome"] == "passed":
            return {"verdict": "passed", "reason": ""}
        return {"verdict": "unexplained", "reason": "not yet looked at"}
    if known.outcome != test["outcome"]:
        return {"verdict": "unexplained", "reason": f"expected {known.outcome}: {known.reason}"}
    return {"verdict": known.verdict, "reason": known.reason}
