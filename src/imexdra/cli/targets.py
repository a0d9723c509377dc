"""What ``imexdra diagnose`` is asked about: kubectl's ``TYPE/NAME`` on top of the original ``[NS/]NAME``.

``imexdra diagnose NAME`` and ``NS/NAME`` name a ComputeDomain, as they always have; a known resource
type before the slash (``pod/``, ``job/``, ``mpijob/``, ``deployment/``, ``namespace/``, kubectl's
short names and plurals too, and ``computedomain/`` for symmetry) turns the argument into
kubectl's ``TYPE/NAME``. A namespace that happens to be called like one of those types is still
reachable with ``-n``: ``imexdra diagnose -n job train``. ``--all`` (no argument) is the whole
namespace, the same as ``namespace/NS``.

Parsing is pure: the caller supplies the context's namespace lazily, so ``--help`` and usage errors
never read a kubeconfig.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

import click


class TargetKind(StrEnum):
    """The kinds of object ``diagnose`` explains."""

    COMPUTE_DOMAIN = "ComputeDomain"
    POD = "Pod"
    JOB = "Job"
    MPIJOB = "MPIJob"
    DEPLOYMENT = "Deployment"
    NAMESPACE = "Namespace"


#: ``TYPE`` spellings accepted before the slash: kubectl's singular, plural, short and qualified names.
TYPE_NAMES: dict[str, TargetKind] = {
    **dict.fromkeys(
        ("computedomain", "computedomains", "computedomains.resource.nvidia.com", "cd"),
        TargetKind.COMPUTE_DOMAIN,
    ),
    **dict.fromkeys(("pod", "pods", "po"), TargetKind.POD),
    **dict.fromkeys(("job", "jobs", "jobs.batch"), TargetKind.JOB),
    **dict.fromkeys(("mpijob", "mpijobs", "mpijobs.kubeflow.org"), TargetKind.MPIJOB),
    **dict.fromkeys(("deployment", "deployments", "deploy", "deployments.apps"), TargetKind.DEPLOYMENT),
    **dict.fromkeys(("namespace", "namespaces", "ns"), TargetKind.NAMESPACE),
}


@dataclass(frozen=True, slots=True)
class Target:
    """One object to diagnose; for a namespace, ``name`` and ``namespace`` are both the namespace."""

    kind: TargetKind
    namespace: str
    name: str

    @property
    def key(self) -> str:
        """``namespace/name``, or just the namespace for a namespace."""
        return self.name if self.kind is TargetKind.NAMESPACE else f"{self.namespace}/{self.name}"

    @property
    def ref(self) -> str:
        """The ``type/name`` form kubectl users type, e.g. ``job/train``."""
        return f"{self.kind.lower()}/{self.name}"


def parse_target(
    argument: str | None, *, namespace: str | None, all_pods: bool, default_namespace: Callable[[], str]
) -> Target:
    """The target meant by ``argument``, ``-n`` and ``--all``.

    Raises:
        click.UsageError: contradicting or missing arguments (exit code 2, click's).

    """
    if all_pods:
        if argument is not None:
            raise click.UsageError("--all diagnoses a whole namespace: give no TARGET with it")
        chosen = namespace or default_namespace()
        return Target(TargetKind.NAMESPACE, chosen, chosen)
    if not argument:
        raise click.UsageError("give a TARGET (a ComputeDomain, or TYPE/NAME), or --all for the namespace")
    head, slash, tail = argument.partition("/")
    kind = TYPE_NAMES.get(head.lower()) if slash else None
    if kind is None:
        if not slash:  # NAME: a ComputeDomain in -n's namespace
            return Target(TargetKind.COMPUTE_DOMAIN, namespace or default_namespace(), argument)
        if not head or not tail or "/" in tail:
            raise click.UsageError(f"{argument!r} is neither NAMESPACE/NAME nor TYPE/NAME")
        _agree(namespace, head, argument)
        return Target(TargetKind.COMPUTE_DOMAIN, head, tail)
    if not tail or "/" in tail:
        raise click.UsageError(f"{argument!r}: expected {head}/NAME")
    if kind is TargetKind.NAMESPACE:
        _agree(namespace, tail, argument)
        return Target(kind, tail, tail)
    return Target(kind, namespace or default_namespace(), tail)


def _agree(namespace: str | None, given: str, argument: str) -> None:
    if namespace is not None and namespace != given:
        raise click.UsageError(f"{argument} contradicts -n {namespace}")
