"""Isolation switched back to ``domain``: the domains still made under ``channel``, and who waits for them.

docs/channel-isolation.md §7: the two kinds of domain never run side by side. Under channel isolation
``isolation.ChannelAssigner`` holds new domains back while domains made under ``domain`` live; this is
the other direction. Under ``domain`` isolation a domain made under ``channel`` is one that records
``status.channel`` or whose live workload template asks the channel class (a restore may drop the
status, not the template); such a domain gets ``IsolationMismatch`` (the reconciler), and while any of them is
still in the API (Terminating ones included: their pods may still hold their channels) a domain that
has no workload template yet is held NotReady with ``IsolationSwitchPending``. When the last one is
gone, the held domains are requeued. Fed by the ComputeDomain and ResourceClaimTemplate informers; no
I/O.
"""

from __future__ import annotations

from collections.abc import Callable

from imexdra.api.computedomain import ComputeDomain
from imexdra.api.constants import (
    COMPUTE_DOMAIN_LABEL_KEY,
    DEVICE_CLASS_CHANNEL,
    TARGET_LABEL_KEY,
    ClaimTemplateTarget,
)
from imexdra.common.kube.models.resource_v1 import ResourceClaimTemplate
from imexdra.controller import reasons
from imexdra.controller.isolation import Verdict


def _uid(cd: ComputeDomain) -> str | None:
    return cd.metadata.uid if cd.metadata is not None and cd.metadata.uid else None


def records_channel(cd: ComputeDomain) -> bool:
    """Whether the domain records a channel number, i.e. was made under channel isolation."""
    return cd.status is not None and cd.status.channel is not None


def template_device_classes(template: ResourceClaimTemplate) -> set[str]:
    """The device classes a claim template's requests name."""
    devices = template.spec.spec.devices if template.spec and template.spec.spec else None
    return {
        request.exactly.deviceClassName
        for request in (devices.requests or [] if devices else [])
        if request.exactly is not None
    }


def channel_kind_owner(template: ResourceClaimTemplate) -> str | None:
    """The UID of the domain whose live workload template this is, if it asks the channel class."""
    meta = template.metadata
    labels = (meta.labels or {}) if meta is not None else {}
    if meta is None or meta.deletionTimestamp is not None:
        return None
    if labels.get(TARGET_LABEL_KEY) != ClaimTemplateTarget.WORKLOAD.value:
        return None
    if template_device_classes(template) != {DEVICE_CLASS_CHANNEL}:
        return None
    return labels.get(COMPUTE_DOMAIN_LABEL_KEY) or None


class ChannelKindDomains:
    """The live domains made under ``channel`` isolation, seen while the driver runs ``domain``.

    Args:
        requeue: queue a held domain (by UID) for reconcile once no channel-kind domain is left.

    """

    def __init__(self, *, requeue: Callable[[str], None]) -> None:
        self._requeue = requeue
        #: UIDs of the domains that record a channel number.
        self._recording: set[str] = set()
        #: Domain UIDs by the UID of their live workload template on the channel class.
        self._templates: dict[str, str] = {}
        #: UIDs of the domains held back until ``_channel_kind`` is empty.
        self._held: set[str] = set()

    def domain_seen(self, cd: ComputeDomain) -> None:
        """A domain added or updated."""
        uid = _uid(cd)
        if uid is None:
            return
        if records_channel(cd):
            self._recording.add(uid)
        else:
            self._forget(lambda: self._recording.discard(uid))

    def domain_gone(self, cd: ComputeDomain) -> None:
        """A domain deleted from the API."""
        uid = _uid(cd)
        if uid is not None:
            self._held.discard(uid)
            self._forget(lambda: self._recording.discard(uid))

    def template_seen(self, template: ResourceClaimTemplate) -> None:
        """A claim template added or updated (it counts while live and on the channel class)."""
        key = template.metadata.uid if template.metadata is not None else None
        if not key:
            return
        owner = channel_kind_owner(template)
        if owner is not None:
            self._templates[key] = owner
        else:
            self._forget(lambda: self._templates.pop(key, None))

    def template_gone(self, template: ResourceClaimTemplate) -> None:
        """A claim template deleted from the API."""
        key = template.metadata.uid if template.metadata is not None else None
        if key:
            self._forget(lambda: self._templates.pop(key, None))

    def _channel_kind(self) -> set[str]:
        return self._recording | set(self._templates.values())

    def hold(self, cd: ComputeDomain) -> Verdict | None:
        """``IsolationSwitchPending`` for a new domain while channel-kind domains live, else None."""
        uid = _uid(cd)
        if uid is None:
            return None
        others = self._channel_kind() - {uid}
        if not others:
            self._held.discard(uid)
            return None
        self._held.add(uid)
        return Verdict(
            None,
            False,
            reasons.ISOLATION_SWITCH_PENDING,
            f'{len(others)} ComputeDomain(s) made under isolation "channel" still live; this one gets '
            "its workload template once they are gone",
        )

    def _forget(self, drop: Callable[[], object]) -> None:
        """Drop one fact; if that left no channel-kind domain, requeue every held one."""
        before = bool(self._channel_kind())
        drop()
        if before and not self._channel_kind():
            for held in sorted(self._held):
                self._requeue(held)
            self._held.clear()
