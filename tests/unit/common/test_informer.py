"""The informer's queue-feeding handler (list/watch behaviour is tested against the real API server)."""

from imexdra.common.kube.models.core_v1 import ConfigMap
from imexdra.common.kube.models.meta_v1 import ObjectMeta, OwnerReference
from imexdra.common.machinery.informer import enqueue
from imexdra.common.machinery.workqueue import WorkQueue


def cm(name: str, owner: str | None = None) -> ConfigMap:
    """A ConfigMap, optionally owned by ``owner``."""
    refs = [OwnerReference(apiVersion="v1", kind="Thing", name=owner, uid=f"uid-{owner}")] if owner else None
    return ConfigMap(metadata=ObjectMeta(name=name, namespace="ns", ownerReferences=refs))


async def test_enqueue_adds_object_keys_for_every_event_kind() -> None:
    """Adds, updates and deletes all put the object's key on the queue, de-duplicated by the queue."""
    queue: WorkQueue[str] = WorkQueue("test-informer-enqueue")
    handler = enqueue(queue)
    handler.on_add(cm("a"))
    handler.on_update(cm("b"), cm("b"))
    handler.on_delete(cm("c"))
    handler.on_add(cm("a"))
    assert [await queue.get() for _ in range(len(queue))] == ["ns/a", "ns/b", "ns/c"]


async def test_enqueue_maps_to_owner_and_skips_none() -> None:
    """A key function can route a child's events to its owner's key, or skip objects by returning None."""
    queue: WorkQueue[str] = WorkQueue("test-informer-enqueue-owner")

    def owner_key(obj: ConfigMap) -> str | None:
        refs = obj.metadata.ownerReferences if obj.metadata else None
        return f"ns/{refs[0].name}" if refs else None

    handler = enqueue(queue, owner_key)
    handler.on_add(cm("child-1", owner="parent"))
    handler.on_add(cm("orphan"))
    assert len(queue) == 1
    assert await queue.get() == "ns/parent"
