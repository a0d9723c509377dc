"""Run upstream's own bats suite for ComputeDomains against imexdra installed from the cluster's registry.

    make upstream-bats UPSTREAM=<git checkout of kubernetes-sigs/dra-driver-nvidia-gpu>

(docs/upstream-tests.md). A containerd rack of the local cluster comes up with its OCI registry
(``RackConfig(from_registry=True)``, 2 trays by default, driver-managed IMEX); this tree's release is
published there with tools/release.py and *not* installed: upstream's files install it themselves,
from ``TEST_CHART_REPO``/``TEST_CHART_VERSION``, in every ``setup_file``. The files run unchanged
from the checkout, in its root as upstream's Makefile runs them, with the knobs the suite reads
(``TEST_*``, read in its Makefile and helpers.sh) set for this rack. Around them, and nothing else:

- ``tools/upstream/bats-helm`` is the ``helm`` on PATH: it adds a site values file (upstream's object
  names) to installs, and skips adding NVIDIA's NGC repository (no Internet here);
- ``tools/upstream/bats-root.sh`` puts the helper libraries at ``/bats-libraries`` in a private
  mount namespace, where upstream's runner image has them.

Each test's outcome (bats' JUnit report) goes to ``bench/results/upstream_bats.json`` with the
verdict and reason of ``tools/upstream/bats_verdicts.py``; an outcome the table does not expect is
marked ``unexplained``. Nothing of upstream's is copied into this repository.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import yaml
from bats_verdicts import verdict

from imexdra_sim import rack
from imexdra_sim.localcluster.cluster import LocalCluster

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
RESULTS = REPO / "bench" / "results" / "upstream_bats.json"
LIBS = REPO / ".venv" / "upstream-bats" / "bats-libraries"
"""Where ``tools/upstream/bats-libs.sh`` (run by ``make upstream-bats``) lays out bats' libraries."""

FILES = (
    "test_basics.bats",
    "test_cd_imex_chan_inject.bats",
    "test_cd_misc.bats",
    "test_cd_logging.bats",
    "test_cd_leader_election.bats",
    "test_cd_mnnvl_workload.bats",
    "test_cd_failover.bats",
    "test_cd_updowngrade.bats",
)
"""Upstream's ``tests-cd`` files (its Makefile), the ones that reach for the Internet last."""

SITE_VALUES = {"nameOverride": "dra-driver-nvidia-gpu", "fullnameOverride": "dra-driver-nvidia-gpu"}
"""Upstream's object names on imexdra's objects (docs/migration.md §2): the suite selects pods by
``dra-driver-nvidia-gpu-component`` and names the Deployment and the Lease
``dra-driver-nvidia-gpu-controller``."""


def git_commit(checkout: Path) -> str:
    """The checkout's HEAD, or a clear error (upstream's basics test needs a git work tree anyway)."""
    done = subprocess.run(
        ["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"{checkout} is no git checkout of upstream: {done.stderr.strip()}")
    return done.stdout.strip()


def suite_env(cluster: LocalCluster, scratch: Path, release: dict[str, str]) -> dict[str, str]:
    """The environment upstream's suite runs in: this rack's kubeconfig, tools and ``TEST_*`` knobs."""
    assert cluster.binaries is not None and cluster.image_registry is not None
    helm = cluster.binaries.path("helm")
    shims = scratch / "bin"
    shims.mkdir()
    (shims / "helm").symlink_to(HERE / "bats-helm")
    values = scratch / "site-values.yaml"
    values.write_text(yaml.safe_dump(SITE_VALUES))
    # helm pulls the OCI chart over TLS from the registry, signed by the cluster's CA.
    bundle = scratch / "ca-bundle.pem"
    system = Path("/etc/ssl/certs/ca-certificates.crt")
    bundle.write_text((system.read_text() if system.exists() else "") + cluster.image_registry.ca.read_text())
    (scratch / "tmp").mkdir()
    image, _, _ = release["image"].partition("@")
    path = [str(shims), str(helm.parent), str(Path(sys.executable).parent), os.environ.get("PATH", "")]
    return {
        **os.environ,
        "PATH": os.pathsep.join(path),
        "KUBECONFIG": str(cluster.kubeconfig),
        "USER": os.environ.get("USER", "root"),
        "TMPDIR": str(scratch / "tmp"),
        "HELM_CONFIG_HOME": str(scratch / "helm-config"),
        "HELM_DATA_HOME": str(scratch / "helm-data"),
        "SSL_CERT_FILE": str(bundle),
        "UPSTREAM_BATS_HELM": str(helm),
        "UPSTREAM_BATS_VALUES": str(values),
        "TEST_CHART_REPO": release["chart"],
        "TEST_CHART_VERSION": release["version"],
        "TEST_EXPECTED_IMAGE_SPEC_SUBSTRING": image,
        # The simulated trays' driver root and /proc/devices (imexdra_sim.rack.chart_values).
        "TEST_NVIDIA_DRIVER_ROOT": f"{rack.SIM_DIR}/driver-root",
        "TEST_ALT_PROC_DEVICES": f"{rack.SIM_DIR}/proc-devices",
        # Upstream's Makefile defaults, which its helpers read unset otherwise.
        "TEST_CHART_LASTSTABLE_REPO": "oci://registry.k8s.io/dra-driver-nvidia/charts/dra-driver-nvidia-gpu",
        "TEST_CHART_LASTSTABLE_VERSION": "0.4.0",
        "TEST_CRD_UPGRADE_TARGET_GIT_REF": "main",
    }


def run_suite(checkout: Path, files: list[str], env: dict[str, str], scratch: Path) -> Path:
    """Run bats over ``files`` in the checkout's root (as upstream's Makefile does); its JUnit report."""
    report = scratch / "report"
    report.mkdir()
    # Upstream's BATS_ARGS, less --abort: every test gets an outcome, not only those before the first failure.
    argv = [
        str(HERE / "bats-root.sh"),
        tempfile.mkdtemp(prefix="upstream-bats-root-"),
        str(LIBS),
        "bats",
        "--print-output-on-failure",
        "--no-tempdir-cleanup",
        "--timing",
        "--report-formatter",
        "junit",
        "--output",
        str(report),
        *(f"tests/bats/{name}" for name in files),
    ]
    with (scratch / "bats.log").open("w") as log:
        subprocess.run(argv, cwd=checkout, env=env, stdout=log, stderr=subprocess.STDOUT, check=False)
    return report / "report.xml"


def outcomes(report: Path) -> list[dict[str, Any]]:
    """Each test case of a bats JUnit report: file, name, outcome, seconds and (failed) output."""
    found = []
    # The report is the one bats just wrote here, not outside input.
    for suite in ET.parse(report).getroot().iter("testsuite"):  # noqa: S314
        for case in suite.iter("testcase"):
            failure, skipped = case.find("failure"), case.find("skipped")
            outcome = "failed" if failure is not None else "skipped" if skipped is not None else "passed"
            entry: dict[str, Any] = {
                "file": suite.get("name", ""),
                "name": case.get("name", ""),
                "outcome": outcome,
                "seconds": round(float(case.get("time", "0")), 1),
            }
            if skipped is not None:
                entry["skip_reason"] = (skipped.text or skipped.get("message") or "").strip()
            if failure is not None:
                entry["output_tail"] = (failure.text or "").strip().splitlines()[-25:]
            found.append(entry)
    return found


def main() -> int:
    """Bring up the rack, run the suite, write the result file; 0 when every outcome is explained."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("checkout", type=Path, help="a git checkout of upstream's repository")
    parser.add_argument("--nodes", type=int, default=2, help="containerd trays (2 to 4)")
    parser.add_argument("--files", nargs="*", default=list(FILES), help="bats files of tests/bats to run")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument(
        "--reclassify", action="store_true", help="only apply bats_verdicts.py anew to --output's tests"
    )
    args = parser.parse_args()
    if args.reclassify:
        record = json.loads(args.output.read_text())
        return write(record, record["tests"], args.output)
    checkout = args.checkout.resolve()
    commit = git_commit(checkout)
    config = rack.RackConfig(nodes=args.nodes, runtime="containerd", from_registry=True)
    cluster = rack.new_rack_cluster(config)
    assert cluster.run_dir is not None
    scratch = cluster.run_dir / "upstream-bats"
    print(f"[upstream-bats] {args.nodes}-tray containerd rack in {cluster.run_dir}", flush=True)
    started = time.monotonic()
    try:
        rack.bring_up(cluster, config, install=lambda c: None)
        release = rack.publish_release(cluster)
        scratch.mkdir()
        env = suite_env(cluster, scratch, release)
        chart = f"{release['chart']} {release['version']}"
        print(f"[upstream-bats] {chart}; bats log: {scratch}/bats.log", flush=True)
        tests = outcomes(run_suite(checkout, args.files, env, scratch))
    finally:
        cluster.stop()
    record = {
        "upstream": {"repository": "kubernetes-sigs/dra-driver-nvidia-gpu", "commit": commit},
        "imexdra": {"commit": release["revision"], "chart": release["chart"], "image": release["image"]},
        "rack": {"trays": args.nodes, "runtime": "containerd", "imex": "driver-managed"},
        "files": args.files,
        "seconds": round(time.monotonic() - started, 1),
    }
    print(f"[upstream-bats] logs: {cluster.run_dir}")
    return write(record, tests, args.output)


def write(record: dict[str, Any], tests: list[dict[str, Any]], output: Path) -> int:
    """Give each test its verdict, write ``record`` to ``output``; 1 if any outcome is unexplained."""
    for test in tests:
        test.update(verdict(test))
    verdicts = sorted({t["verdict"] for t in tests})
    record["summary"] = {v: sum(t["verdict"] == v for t in tests) for v in verdicts}
    record["tests"] = tests
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(record, indent=2) + "\n")
    print(f"[upstream-bats] {record['summary']}; written to {output}")
    unexplained = [t["name"] for t in tests if t["verdict"] == "unexplained"]
    for name in unexplained:
        print(f"[upstream-bats] unexplained: {name}")
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
