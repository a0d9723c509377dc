"""The version smoke: the chart's install and the seed workloads on every Kubernetes minor it admits.

For each version (``KUBE_VERSION`` and ``KUBE_COMPAT_VERSIONS`` of tools/k8s/versions.env, as
``imexdra_sim.localcluster.binaries`` holds them, or the ones given), runs the e2e modules of
``SMOKE`` as CI runs them, with ``IMEXDRA_KUBE_VERSION`` selecting that version's binaries
(tools/k8s/build-kube.sh; docs/kubernetes-versions.md): the 18-tray containerd rack with the seeds'
MPIJob and Deployment and every file of examples/ as written, and the driver-managed fakecri rack
installed over upstream's values file. From each run's JUnit report it records per case the outcome
and duration, and the apiserver's own version string (``tests/support/kubeversion.py`` records it,
and fails the run if the apiserver or a kubelet is not the selected version), plus the run's wall
time.

Run: ``make smoke-versions`` (builds the versions first; not part of ``make test``).
Output: JSON in ``bench/results/kube_versions.json``, the last run of each version (a run of some versions
replaces only theirs); exits 1 if any case failed or a run left no report.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from imexdra_sim.localcluster.binaries import KUBE_COMPAT_VERSIONS, KUBE_VERSION, KUBE_VERSION_ENV

ROOT = Path(__file__).resolve().parents[1]
RESULT = ROOT / "bench" / "results" / "kube_versions.json"
SMOKE = ("tests/e2e/test_examples.py", "tests/e2e/test_driver_managed.py")
VERSION_PROPERTY = "kubernetes_version"  # tests/support/kubeversion.py's RECORDED_PROPERTY


def outcome(case: ET.Element) -> str:
    """passed, failed, error or skipped, as JUnit marks a test case."""
    for tag in ("failure", "error", "skipped"):
        if case.find(tag) is not None:
            return "failed" if tag == "failure" else tag
    return "passed"


def read_report(report: Path) -> dict[str, Any]:
    """The cases of a pytest JUnit report and the apiserver versions its test suites recorded."""
    root = ET.parse(report).getroot()  # noqa: S314 - pytest's own report, in our temp dir
    cases = [
        {
            "case": f"{c.get('classname', '').rsplit('.', 1)[-1]}.py::{c.get('name')}",
            "outcome": outcome(c),
            "duration_s": round(float(c.get("time", "0")), 1),
        }
        for c in root.iter("testcase")
    ]
    recorded = {p.get("value") for p in root.iter("property") if p.get("name") == VERSION_PROPERTY}
    return {"kubernetes_version": sorted(v for v in recorded if v), "cases": cases}


def smoke(version: str, pytest_args: list[str], commit: str) -> dict[str, Any]:
    """Run ``SMOKE`` against ``version``'s binaries; its cases, outcomes and the apiserver's version."""
    started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "junit.xml"
        command = [sys.executable, "-m", "pytest", *SMOKE, f"--junitxml={report}", *pytest_args]
        print(f"[smoke-versions] Kubernetes {version}: {' '.join(command[2:])}", file=sys.stderr, flush=True)
        start = time.monotonic()
        exit_code = subprocess.run(
            command, cwd=ROOT, env={**os.environ, KUBE_VERSION_ENV: version}, stdout=sys.stderr, check=False
        ).returncode
        duration = round(time.monotonic() - start, 1)
        found = read_report(report) if report.exists() else {"kubernetes_version": [], "cases": []}
    counts = {
        o: sum(c["outcome"] == o for c in found["cases"]) for o in ("passed", "failed", "error", "skipped")
    }
    return {
        "selected": version,
        **found,
        **counts,
        "pytest_exit": exit_code,
        "duration_s": duration,
        "started": started,
        "commit": commit,
        "load_average_at_end": os.getloadavg(),
    }


def merged(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The recorded runs with these replacing the ones of the same versions, oldest version first."""
    recorded = json.loads(RESULT.read_text())["versions"] if RESULT.exists() else []
    kept = {r["selected"]: r for r in recorded} | {r["selected"]: r for r in runs}
    return sorted(kept.values(), key=lambda r: tuple(int(p) for p in r["selected"].split(".")))


def main() -> None:
    """Smoke each version in turn, then record the results and say whether all passed."""
    default = [*KUBE_COMPAT_VERSIONS, KUBE_VERSION]  # oldest first
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "versions",
        nargs="*",
        default=default,
        help=f"Kubernetes versions (default: {default}); each one's result replaces its recorded one",
    )
    parser.add_argument("--pytest-args", default="", help="extra pytest arguments, e.g. '-k seed'")
    args = parser.parse_args()
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    runs = [smoke(version, args.pytest_args.split(), commit.strip()) for version in args.versions]
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    RESULT.write_text(json.dumps({"modules": list(SMOKE), "versions": merged(runs)}, indent=1) + "\n")
    summary = [
        {k: r[k] for k in ("selected", "kubernetes_version", "passed", "failed", "error", "duration_s")}
        for r in runs
    ]
    print(json.dumps({"result": str(RESULT.relative_to(ROOT)), "versions": summary}, indent=1))
    if any(r["pytest_exit"] != 0 or not r["cases"] for r in runs):
        sys.exit(1)


if __name__ == "__main__":
    main()
