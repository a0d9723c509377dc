"""The files of examples/ stay what examples/README.md says they are, and every one is run by an e2e test.

Each file parses, opens with a header comment, holds the kinds documented here and in the folder's
README, names no namespace (``kubectl apply -n`` puts it where its user wants), and is self-contained:
every claim template a pod asks for is one of the file's own ComputeDomains. The e2e tier applies each
file (``tests/e2e/test_examples.py``), so a file no test applies fails here.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
import yaml

from imexdra.api.computedomain import ComputeDomainSpec
from imexdra_sim import demo, examples, seedworkloads
from tests.support.examples import CHANNEL_EXAMPLES

KINDS = {
    "channel-injection-all.yaml": ["ComputeDomain", "Pod"],
    "channel-injection.yaml": ["ComputeDomain", "Pod"],
    "computedomain-deployment.yaml": ["ComputeDomain", "Deployment"],
    "gb200-mpijob.yaml": ["ComputeDomain", "MPIJob"],
    "imex-workload.yaml": ["ComputeDomain", "Pod"],
}
NAMES = sorted(KINDS)


def documents(name: str) -> list[dict[str, Any]]:
    """The objects of ``examples/<name>``, as the file holds them."""
    return examples.load(name)


def pod_specs(item: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod specs of a workload object: a Pod's own, a Deployment's template, each MPIJob replica's."""
    spec: dict[str, Any] = item["spec"]
    if item["kind"] == "Pod":
        return [spec]
    if item["kind"] == "MPIJob":
        return [replica["template"]["spec"] for replica in spec["mpiReplicaSpecs"].values()]
    return [spec["template"]["spec"]]


def test_the_folder_holds_the_documented_files() -> None:
    """examples/ holds exactly the files documented here, and its README names each."""
    assert [path.name for path in examples.files()] == NAMES
    readme = (examples.EXAMPLES / "README.md").read_text()
    missing = [name for name in NAMES if f"[{name}]({name})" not in readme]
    assert not missing, f"examples/README.md does not link {missing}"


def test_every_file_is_applied_by_an_e2e_test() -> None:
    """Each file is the seed MPIJob's, the seed Deployment's, or one of the e2e module's demo specs."""
    applied = {seedworkloads.MPIJOB_EXAMPLE, seedworkloads.DEPLOYMENT_EXAMPLE, *CHANNEL_EXAMPLES}
    assert applied == set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_a_file_holds_its_documented_kinds_and_no_namespace(name: str) -> None:
    """The file opens with a comment, holds its kinds in order, and leaves the namespace to its user."""
    text = (examples.EXAMPLES / name).read_text()
    assert text.startswith("# "), f"{name} has no header comment"
    items = list(yaml.safe_load_all(text))
    assert all(isinstance(item, dict) for item in items), f"{name} has a document that is no object"
    assert [item["kind"] for item in items] == KINDS[name]
    assert all("namespace" not in item["metadata"] for item in items)


@pytest.mark.parametrize("name", NAMES)
def test_pods_claim_the_files_own_channel_templates(name: str) -> None:
    """Every ComputeDomain spec decodes as the driver's; every pod claim names one of their templates."""
    items = documents(name)
    domains = [msgspec.convert(i["spec"], ComputeDomainSpec) for i in items if i["kind"] == "ComputeDomain"]
    templates = {domain.channel.resource_claim_template.name for domain in domains}
    claimed = {
        claim["resourceClaimTemplateName"]
        for item in items
        if item["kind"] != "ComputeDomain"
        for spec in pod_specs(item)
        for claim in spec.get("resourceClaims", [])
    }
    assert claimed, f"no pod of {name} takes a channel"
    assert claimed <= templates


@pytest.mark.parametrize("name", NAMES)
def test_extended_resources_are_limits_too(name: str) -> None:
    """A GPU (any extended resource) asked for in requests is in limits at the same count, as the API
    server requires ("Limit must be set for non overcommitable resources").
    """
    for item in documents(name):
        for spec in pod_specs(item) if item["kind"] != "ComputeDomain" else []:
            for container in spec["containers"]:
                resources = container.get("resources", {})
                limits = resources.get("limits", {})
                for resource, count in resources.get("requests", {}).items():
                    if "/" in resource and not resource.startswith("hugepages-"):
                        assert limits.get(resource) == count, (name, container["name"], resource)


def test_the_demo_names_what_the_mpijob_file_names() -> None:
    """The demo's domain, claim template and job names are those of examples/gb200-mpijob.yaml."""
    domain, job = seedworkloads.mpijob(demo.WORKLOAD_NAMESPACE, workers=4)
    assert domain["metadata"] == {"name": demo.DOMAIN, "namespace": demo.WORKLOAD_NAMESPACE}
    assert domain["spec"]["channel"]["resourceClaimTemplate"]["name"] == demo.CLAIM_TEMPLATE
    assert job["metadata"]["name"] == demo.JOB
    assert job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 4
