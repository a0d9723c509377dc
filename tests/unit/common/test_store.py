"""The indexed store: keys, index maintenance on every write, and the relist diff behind synthetic deletes."""

import pytest

from imexdra.common.kube.models.core_v1 import ConfigMap, Node, Pod, PodSpec
from imexdra.common.kube.models.meta_v1 import ObjectMeta, OwnerReference
from imexdra.common.machinery.store import (
    Store,
    diff,
    index_by_label,
    index_by_namespace,
    index_by_node_name,
    index_by_owner_uid,
    index_by_uid,
    object_key,
)


def cm(name: str, rv: str = "1", *, namespace: str = "ns", labels: dict[str, str] | None = None) -> ConfigMap:
    """A ConfigMap with the given identity."""
    meta = ObjectMeta(name=name, namespace=namespace, resourceVersion=rv, labels=labels, uid=f"uid-{name}")
    return ConfigMap(metadata=meta)


def pod(name: str, node: str | None, *, owner: str | None = None) -> Pod:
    """A Pod on ``node`` owned by ``owner``."""
    refs = [OwnerReference(apiVersion="apps/v1", kind="DaemonSet", name="ds", uid=owner)] if owner else None
    return Pod(
        metadata=ObjectMeta(name=name, namespace="ns", ownerReferences=refs),
        spec=PodSpec(containers=[], nodeName=node),
    )


@pytest.mark.parametrize(
    ("obj", "key"),
    [(cm("a"), "ns/a"), (Node(metadata=ObjectMeta(name="n1")), "n1")],
    ids=["namespaced", "cluster-scoped"],
)
def test_object_key(obj: ConfigMap | Node, key: str) -> None:
    """Namespaced objects are keyed ns/name, cluster-scoped ones by name."""
    assert object_key(obj) == key


def test_object_key_requires_a_name() -> None:
    """An object without a name cannot be cached."""
    with pytest.raises(ValueError, match=r"metadata\.name"):
        object_key(ConfigMap(metadata=ObjectMeta(namespace="ns")))


@pytest.mark.parametrize(
    ("index", "obj", "values"),
    [
        (index_by_namespace, cm("a"), ["ns"]),
        (index_by_uid, cm("a"), ["uid-a"]),
        (index_by_label("cd"), cm("a", labels={"cd": "u1"}), ["u1"]),
        (index_by_label("cd"), cm("a", labels={"other": "x"}), []),
        (index_by_owner_uid, pod("p", "n1", owner="ds-uid"), ["ds-uid"]),
        (index_by_owner_uid, pod("p", "n1"), []),
        (index_by_node_name, pod("p", "n1"), ["n1"]),
        (index_by_node_name, pod("p", None), []),
        (index_by_node_name, cm("a"), []),
    ],
    ids=["namespace", "uid", "label", "label-absent", "owner", "no-owner", "node", "unscheduled", "no-spec"],
)
def test_index_functions(index, obj, values: list[str]) -> None:
    """Each stock index function yields the expected values, and nothing for objects lacking the field."""
    assert list(index(obj)) == values


def test_indexes_follow_updates_and_deletes() -> None:
    """Changing or deleting an object moves or removes it in every index."""
    store: Store[ConfigMap] = Store({"cd": index_by_label("cd")})
    store.upsert(cm("a", labels={"cd": "u1"}))
    store.upsert(cm("b", labels={"cd": "u1"}))
    assert store.index_keys("cd", "u1") == ["ns/a", "ns/b"]
    old = store.upsert(cm("a", "2", labels={"cd": "u2"}))
    assert old is not None and old.metadata.resourceVersion == "1"
    assert store.index_keys("cd", "u1") == ["ns/b"]
    assert [o.metadata.name for o in store.by_index("cd", "u2")] == ["a"]
    store.delete("ns/b")
    assert store.index_keys("cd", "u1") == []
    assert store.delete("ns/missing") is None


def test_indexer_added_later_indexes_existing_objects() -> None:
    """An index registered after objects were stored covers them immediately."""
    store: Store[ConfigMap] = Store()
    store.upsert(cm("a", labels={"cd": "u1"}))
    store.add_indexer("cd", index_by_label("cd"))
    assert store.index_keys("cd", "u1") == ["ns/a"]
    with pytest.raises(ValueError, match="already exists"):
        store.add_indexer("cd", index_by_uid)
    with pytest.raises(KeyError):
        store.by_index("nope", "x")


def test_lookups() -> None:
    """get, get_by_name, keys, objects, len and in agree."""
    store: Store[ConfigMap] = Store()
    store.upsert(cm("a"))
    assert store.get("ns/a") is store.get_by_name("a", "ns")
    assert store.get_by_name("a") is None
    assert store.keys() == ["ns/a"]
    assert len(store) == 1 and "ns/a" in store and "ns/b" not in store
    assert [o.metadata.name for o in store.objects()] == ["a"]


@pytest.mark.parametrize(
    ("cached", "listed", "added", "updated", "deleted"),
    [
        ([], [cm("a")], ["a"], [], []),
        ([cm("a")], [cm("a")], [], [], []),
        ([cm("a")], [cm("a", "2")], [], ["a"], []),
        ([cm("a"), cm("b")], [cm("b")], [], [], ["a"]),
        ([cm("a"), cm("b", "1")], [cm("b", "5"), cm("c")], ["c"], ["b"], ["a"]),
        ([cm("a")], [], [], [], ["a"]),
    ],
    ids=["new", "unchanged", "changed", "vanished", "mixed", "all-gone"],
)
def test_diff(cached, listed, added, updated, deleted) -> None:
    """A relist reports new, changed (by resourceVersion) and vanished objects, skipping unchanged ones."""
    changes = diff({object_key(o): o for o in cached}, listed)
    assert [o.metadata.name for o in changes.added] == added
    assert [new.metadata.name for _, new in changes.updated] == updated
    assert [o.metadata.name for o in changes.deleted] == deleted


def test_diff_deletes_carry_last_known_state() -> None:
    """A synthetic delete hands out the cached object (the last state seen), like DeletedFinalStateUnknown."""
    last = cm("a", "7", labels={"k": "v"})
    (gone,) = diff({"ns/a": last}, []).deleted
    assert gone is last


def test_replace_makes_store_match_the_list_and_keeps_indexes() -> None:
    """replace applies a relist: the store then holds exactly the listed objects, indexes included."""
    store: Store[ConfigMap] = Store({"cd": index_by_label("cd")})
    store.upsert(cm("a", labels={"cd": "u1"}))
    store.upsert(cm("b", labels={"cd": "u1"}))
    changes = store.replace([cm("b", "2", labels={"cd": "u2"}), cm("c", labels={"cd": "u1"})])
    assert sorted(store.keys()) == ["ns/b", "ns/c"]
    assert store.index_keys("cd", "u1") == ["ns/c"]
    assert store.index_keys("cd", "u2") == ["ns/b"]
    assert [o.metadata.name for o in changes.deleted] == ["a"]
