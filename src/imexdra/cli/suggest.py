"""The YAML ``imexdra diagnose`` shows when no ComputeDomain stands behind a workload's claim template.

Two documents: the smallest ComputeDomain whose ``spec.channel.resourceClaimTemplate.name`` is the
template the workload names (the controller then creates that template with the domain's UID in its
``ComputeDomainChannelConfig``), and the pod spec stanza that names the template and hands the claim
to a container. ``numNodes`` is left out: it is deprecated and defaults to 0 (do not wait).
"""

from __future__ import annotations

from dataclasses import dataclass

import yaml

from imexdra.api.constants import API_VERSION, KIND_COMPUTE_DOMAIN

#: The suffix the docs and the demo give workload templates; stripped to name the suggested domain.
_TEMPLATE_SUFFIX = "-channel"


@dataclass(frozen=True, slots=True)
class Suggestion:
    """A ComputeDomain behind ``template`` and the stanza of the pod spec that uses it."""

    namespace: str
    template: str
    #: The pod's claim entry name and the container that gets the channel.
    claim: str = "imex"
    container: str = "main"
    #: Where the stanza goes, e.g. ``spec.template.spec of job/train``.
    location: str = "the pod's spec"

    @property
    def domain_name(self) -> str:
        """``train`` for template ``train-channel``; the template's own name otherwise."""
        stem = self.template.removesuffix(_TEMPLATE_SUFFIX)
        return stem or self.template

    def documents(self) -> tuple[dict[str, object], dict[str, object]]:
        """The ComputeDomain manifest and the pod spec stanza."""
        domain: dict[str, object] = {
            "apiVersion": API_VERSION,
            "kind": KIND_COMPUTE_DOMAIN,
            "metadata": {"name": self.domain_name, "namespace": self.namespace},
            "spec": {"channel": {"resourceClaimTemplate": {"name": self.template}}},
        }
        stanza: dict[str, object] = {
            "resourceClaims": [{"name": self.claim, "resourceClaimTemplateName": self.template}],
            "containers": [{"name": self.container, "resources": {"claims": [{"name": self.claim}]}}],
        }
        return domain, stanza

    def to_yaml(self) -> str:
        """Both documents as one YAML stream, the stanza introduced by a comment saying where it goes."""
        domain, stanza = self.documents()
        return (
            yaml.safe_dump(domain, sort_keys=False)
            + f"---\n# merge into {self.location}:\n"
            + yaml.safe_dump(stanza, sort_keys=False)
        )

    def to_json(self) -> dict[str, object]:
        """Stable JSON form: the template it is for, both documents, and the YAML text."""
        domain, stanza = self.documents()
        return {
            "template": self.template,
            "computeDomain": domain,
            "podSpec": stanza,
            "location": self.location,
            "yaml": self.to_yaml(),
        }
