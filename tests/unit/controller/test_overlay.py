"""The overlay of informer stores and the controller's own writes (its mutation cache)."""

from __future__ import annotations

import datetime as dt

from imexdra.common.kube.models.core_v1 import ConfigMap
from imexdra.common.kube.models.meta_v1 import ObjectMeta
from imexdra.common.machinery.store import Store, index_by_label
from imexdra.controller.caches import domain_label
from imexdra.controller.overlay import DOMAIN_INDEX, Overlay

LABEL = "resource.nvidia.com/computeDomain"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def obj(
    rv: int, *, uid: str = "u1", name: str = "x", deleting: bool = False, finalizers: bool = True
) -> ConfigMap:
    return ConfigMap(
        metadata=ObjectMeta(
            name=name,
            namespace="ns",
            uid=f"obj-{name}",
            resourceVersion=str(rv),
            labels={LABEL: uid},
            finalizers=["f"] if finalizers else None,
            deletionTimestamp=dt.datetime(2026, 1, 1, tzinfo=dt.UTC) if deleting else None,
        )
    )


def setup() -> tuple[Store[ConfigMap], Overlay[ConfigMap], Clock]:
    store: Store[ConfigMap] = Store({DOMAIN_INDEX: index_by_label(LABEL)})
    clock = Clock()
    return store, Overlay([store], domain_label, ttl=30.0, clock=clock), clock


def test_own_write_shows_until_the_informer_catches_up() -> None:
    """A created object is visible before its watch event; the newer cached version then wins."""
    store, overlay, _ = setup()
    overlay.record(obj(5))
    assert overlay.get("ns/x") == obj(5)
    assert [o.metadata.name for o in overlay.by_domain("u1") if o.metadata] == ["x"]
    store.upsert(obj(4))
    assert overlay.get("ns/x") == obj(5)
    store.upsert(obj(7))
    assert overlay.get("ns/x") == obj(7)


def test_record_expires_after_ttl() -> None:
    """A write the informer never confirms stops shadowing the cache after the TTL."""
    store, overlay, clock = setup()
    store.upsert(obj(3))
    overlay.record(obj(5))
    clock.now = 31.0
    assert overlay.get("ns/x") == obj(3)


def test_gone_objects_read_as_absent_until_the_informer_agrees() -> None:
    """A deleted finalizer-less object (or one our patch released) disappears at once."""
    store, overlay, _ = setup()
    store.upsert(obj(3))
    overlay.mark_gone(obj(3))
    assert overlay.get("ns/x") is None
    assert overlay.by_domain("u1") == []
    overlay.record(obj(4, deleting=True, finalizers=False))
    assert overlay.get("ns/x") is None
    store.delete("ns/x")
    store.upsert(obj(9, name="x"))
    assert overlay.get("ns/x") == obj(9)


def test_observed_deletion_drops_an_older_record() -> None:
    """Once the informer saw the object deleted, our earlier record of it no longer shadows anything."""
    _, overlay, _ = setup()
    overlay.record(obj(5))
    overlay.observe_deleted(obj(6))
    assert overlay.get("ns/x") is None


def test_deleting_marker_applies_to_the_same_object_only() -> None:
    """A delete we issued makes that object read as terminating; a recreated one (new UID) does not."""
    store, overlay, clock = setup()
    original = obj(3)
    store.upsert(original)
    assert not overlay.terminating(original)
    overlay.mark_deleting(original)
    assert overlay.terminating(original)
    recreated = ConfigMap(metadata=ObjectMeta(name="x", namespace="ns", uid="other", resourceVersion="8"))
    assert not overlay.terminating(recreated)
    overlay.mark_deleting(original)
    clock.now = 31.0
    assert not overlay.terminating(original)
    assert overlay.terminating(obj(3, deleting=True))


def test_by_domain_filters_on_the_current_label() -> None:
    """An object whose freshest version names another domain is not listed for the old one."""
    store, overlay, _ = setup()
    store.upsert(obj(3, uid="u1"))
    overlay.record(obj(4, uid="u2"))
    assert overlay.by_domain("u1") == []
    assert overlay.by_domain("u2") == [obj(4, uid="u2")]


def test_out_of_order_answers_keep_the_newest_record() -> None:
    """Two concurrent writes answering out of order leave the newer version recorded."""
    _, overlay, _ = setup()
    overlay.record(obj(7))
    overlay.record(obj(6))
    assert overlay.get("ns/x") == obj(7)
