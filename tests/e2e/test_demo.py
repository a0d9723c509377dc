"""``imexdra demo`` as a user runs it: the real command, driver-managed and ``--host-managed``.

The command is run as a subprocess (its own process group, as from a shell). It must finish with exit
code 0, print each step, the user's view and each worker's injected channel, and leave nothing behind:
its run directory is removed and none of its processes outlive it. The default run is on containerd
nodes (each worker's own device listing from ``kubectl logs``, each daemon's ``nvidia-imex`` mount);
the host-managed run uses ``--runtime fakecri``, so the host-process path stays covered.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from imexdra_sim import demo
from tests.processes import processes_mentioning

IMEXDRA = Path(sys.executable).parent / "imexdra"
CHANNEL0 = "/dev/nvidia-caps-imex-channels/channel0"


@pytest.mark.parametrize(
    ("args", "mode"),
    [((), "driver-managed IMEX"), (("--host-managed", "--runtime", "fakecri"), "HostManagedIMEX")],
    ids=["driver-managed-containerd", "host-managed-fakecri"],
)
def test_demo_runs_the_seed_job_and_cleans_up(args: tuple[str, ...], mode: str) -> None:
    """Exit 0; the header, every step done, four workers with channel0; no run dir or process left."""
    result = subprocess.run(
        [str(IMEXDRA), "demo", *args],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        start_new_session=True,
    )
    out = result.stdout
    assert result.returncode == 0, f"{out[-4000:]}\n{result.stderr[-4000:]}"
    assert f"imexdra demo: 4-node simulated GB200 rack, {mode}" in out
    steps = [line for line in out.splitlines() if line.startswith("[")]
    dones = [line for line in out.splitlines() if line.strip().startswith("done in ")]
    assert len(steps) >= 4 and len(dones) == len(steps)
    assert f"create ComputeDomain {demo.DOMAIN} and MPIJob {demo.JOB} (4 workers x 4 GPUs)" in out
    assert "delete the MPIJob and the ComputeDomain" in out
    assert f"$ kubectl get computedomain -n {demo.WORKLOAD_NAMESPACE} -o wide" in out
    injected = out.split("IMEX channel injected into each worker container:")[1]
    if "fakecri" in args:
        assert injected.count(CHANNEL0) == 4
    else:
        # Installed as an operator installs: the release pushed to the cluster's registry, the OCI chart.
        assert ", installed from the cluster's registry" in out
        assert "make release REGISTRY=" in out and "helm install imexdra oci://" in out
        # The stand-in's own words, from each worker container's log (a real char device, major 235).
        assert injected.count("IMEX channel channel0: character device eb:0") == 4
        assert len(re.findall(r" 235, +0 ", injected)) == 4  # ls -l: major, minor (GNU ls pads less)
        daemons = out.split("nvidia-imex in each IMEX daemon container")[1]
        assert daemons.count("/host/sim/driver-root/usr/bin/nvidia-imex (ro,") == 4
    assert "logs in" not in out  # a successful run keeps nothing
    [run_dir] = re.findall(r"^run directory \(logs, kubeconfig\): (/tmp/imx-\S+)$", out, re.M)
    assert not Path(run_dir).exists()
    assert processes_mentioning(run_dir) == {}
