"""``imexdra diagnose pod/…``, ``job/…`` and ``--all`` against the real local control plane.

The scene, built as cluster admin without the driver running (the DeviceClasses installed as the chart
has them): a ComputeDomain ``train`` and its workload template as the controller renders it, and
three pods bound to a node object of the module's own that has no kubelet (so nothing schedules,
prepares or overwrites them): ``lost`` names a template that does not exist, ``orphan`` a template
whose channel config names a domainID no ComputeDomain has, and ``healthy`` uses ``train``'s
template and is marked Running and Ready through the status subresource. A suspended Job using
``train``'s template has no pods, so its pod template is checked. The installed CLI runs as a
subprocess with the admin kubeconfig; the ComputeDomain it suggests is then applied as is, which the
real CRD validation accepts.
"""

from __future__ import annotations

import json
import secrets
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from imexdra_sim.builders import channel_template, compute_domain
from imexdra_sim.localcluster.cluster import LocalCluster
from tests.integration.pluginharness import install_api
from tests.support.builders import channel_pod
from tests.support.cli import imexdra
from tests.support.kubectl import apply, patch_status, uid_of

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def scene(cluster: LocalCluster, compute_domain_crds: None) -> Iterator[dict[str, str]]:
    """The objects described in the module docstring; the namespace and node names by role."""
    install_api(cluster)
    suffix = secrets.token_hex(3)
    ns, node = f"cli-diag-{suffix}", f"cli-diag-node-{suffix}"
    cluster.create_namespace(ns)
    try:
        apply(cluster, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})
        apply(cluster, compute_domain("train", ns))
        uid = uid_of(cluster, "computedomain", "train", ns)
        apply(
            cluster,
            channel_template(ns, "train-channel", uid),
            channel_template(ns, "orphan-channel", str(uuid.uuid4())),
            bound_pod(ns, "lost", "lost-channel", node),
            bound_pod(ns, "orphan", "orphan-channel", node),
            bound_pod(ns, "healthy", "train-channel", node),
            suspended_job(ns, "waiting", "train-channel"),
        )
        ready = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        patch_status(cluster, "pod", "healthy", ns, {"status": ready})
        yield {"ns": ns, "node": node}
    finally:
        cluster.kubectl("delete", "node", node, "--wait=false", check=False)
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def bound_pod(ns: str, name: str, template: str, node: str) -> dict[str, Any]:
    pod = channel_pod(name, ns, template, claim="imex")
    # No kubelet ever reports for the node: tolerate the taints that would evict the pods meanwhile.
    pod["spec"].update(nodeName=node, tolerations=[{"operator": "Exists"}])
    return pod


def suspended_job(ns: str, name: str, template: str) -> dict[str, Any]:
    pod = channel_pod("unused", ns, template, claim="imex")
    pod["spec"]["restartPolicy"] = "Never"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"suspend": True, "template": {"spec": pod["spec"]}},
    }


def diagnose_json(cluster: LocalCluster, *args: str) -> tuple[int, dict[str, Any]]:
    result = imexdra(cluster, "diagnose", *args, "-o", "json")
    assert result.returncode in (0, 1, 4), result.stdout + result.stderr
    document: dict[str, Any] = json.loads(result.stdout)
    return result.returncode, document


def problems(document: dict[str, Any]) -> list[str]:
    return [f["message"] for f in document["findings"] if f["severity"] != "info"]


def test_pod_whose_template_is_missing(cluster: LocalCluster, scene: dict[str, str]) -> None:
    """Exit 1: the template does not exist and no domain names it; the suggested domain applies cleanly."""
    ns = scene["ns"]
    code, document = diagnose_json(cluster, "pod/lost", "-n", ns)
    assert code == 1
    assert problems(document) == [
        f"ResourceClaimTemplate {ns}/lost-channel (used by pod lost (claim imex)) does not exist, and no "
        f"ComputeDomain in {ns} names it; the ComputeDomains here name: train-channel (train)"
    ]
    [suggestion] = document["suggestions"]
    assert suggestion["podSpec"]["resourceClaims"] == [
        {"name": "imex", "resourceClaimTemplateName": "lost-channel"}
    ]
    domain, _ = yaml.safe_load_all(suggestion["yaml"])
    apply(cluster, domain)
    code, after = diagnose_json(cluster, "pod/lost", "-n", ns)
    assert code == 1  # no controller runs here to create the template, but the domain is found now
    [still] = problems(after)
    assert f"does not exist, though ComputeDomain {ns}/lost names it" in still
    assert after["suggestions"] == []


def test_pod_with_a_template_but_no_compute_domain(cluster: LocalCluster, scene: dict[str, str]) -> None:
    """Exit 1: the template's domainID is no ComputeDomain's UID; the text report ends with the YAML."""
    ns = scene["ns"]
    code, document = diagnose_json(cluster, "pod/orphan", "-n", ns)
    assert code == 1
    [error] = problems(document)
    assert error.startswith(
        f"ResourceClaimTemplate {ns}/orphan-channel (used by pod orphan (claim imex)) names"
    )
    assert error.endswith("but no ComputeDomain has that UID")
    text = imexdra(cluster, "diagnose", "pod/orphan", "-n", ns)
    assert text.returncode == 1
    assert text.stdout.startswith(f"Pod {ns}/orphan: 1 problem(s) found\n[ERROR] ")
    assert (
        "# YAML that would work (template orphan-channel):\napiVersion: resource.nvidia.com/v1beta1\n"
        in text.stdout
    )


def test_healthy_pod_and_workload_without_pods(cluster: LocalCluster, scene: dict[str, str]) -> None:
    """Exit 0 for the Running pod of ``train`` and for the suspended Job, whose pod template is checked."""
    ns = scene["ns"]
    code, document = diagnose_json(cluster, "pod/healthy", "-n", ns)
    assert (code, problems(document), document["suggestions"]) == (0, [], [])
    messages = [f["message"] for f in document["findings"]]
    assert any(m.startswith(f"ComputeDomain {ns}/train (status ") for m in messages), messages
    result = imexdra(cluster, "diagnose", "job/waiting", "-n", ns)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith(f"Job {ns}/waiting: no problem found\n")
    assert "[INFO] job/waiting has no pods yet: checked its pod template" in result.stdout


def test_whole_namespace_and_missing_targets(cluster: LocalCluster, scene: dict[str, str]) -> None:
    """``--all`` checks every pod with a claim; a missing pod is exit code 4."""
    ns = scene["ns"]
    code, document = diagnose_json(cluster, "--all", "-n", ns)
    assert code == 1
    assert sorted(document["checked"]) == ["pod healthy", "pod lost", "pod orphan"]
    assert len(problems(document)) == 2
    same = imexdra(cluster, "diagnose", f"namespace/{ns}", "-o", "json")
    assert json.loads(same.stdout)["checked"] == document["checked"]
    code, missing = diagnose_json(cluster, "pod/absent", "-n", ns)
    assert (code, missing["found"]) == (4, False)
