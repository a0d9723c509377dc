"""What makes a msgspec Struct a Kubernetes object: the model base, a kind's API facts, the decoders.

- :class:`Model` is the base of every model, generated (``common.kube.models``) or ours
  (``api.computedomain``, the controller's slim caches): omit-when-None encoding, and
  ``to_dict``/``from_dict`` between a model and plain JSON-like data.
- A kind's class carries its URL facts as ``_api_info``, an :class:`ApiInfo` (group, version, kind,
  plural, namespaced, and the subresource a class stands for, e.g. ComputeDomain's ``status``);
  :func:`api_info` reads it, and the client builds every path from it (``transport.resource_path``).
- :func:`decode_object` and :func:`decode_list` turn response bodies into models straight from bytes.

They replace the third-party client library's equivalents, whose package imported its HTTP clients
into every process (docs/kube-client.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Self, TypeVar

import msgspec

R = TypeVar("R")


class Model(msgspec.Struct, omit_defaults=True):
    """A Kubernetes API object or part of one; fields left None are not encoded."""

    @classmethod
    def from_dict(cls, data: Any) -> Self:
        """The model of ``data`` (parsed JSON or YAML), checked against the fields' types."""
        return msgspec.convert(data, cls)

    def to_dict(self) -> dict[str, Any]:
        """The model as plain data, as it goes on the wire (times as RFC 3339 strings)."""
        data: dict[str, Any] = msgspec.to_builtins(self)
        return data


@dataclass(frozen=True, slots=True)
class ApiInfo:
    """Where a kind lives: ``/apis/<group>/<version>[/namespaces/<ns>]/<plural>[/<name>[/<sub>]]``."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    #: The subresource this class reads and writes (``status``), None for the object itself.
    subresource: str | None = None

    @property
    def api_version(self) -> str:
        """The objects' ``apiVersion``: ``<group>/<version>``, or the version alone for the core group."""
        return f"{self.group}/{self.version}" if self.group else self.version


def api_info(res: type[Any] | object) -> ApiInfo:
    """The API facts of a kind's class (or of one of its objects); TypeError for any other class."""
    info = getattr(res, "_api_info", None)
    if not isinstance(info, ApiInfo):
        name = res.__name__ if isinstance(res, type) else type(res).__name__
        raise TypeError(f"{name} is not a Kubernetes kind (it has no ApiInfo)")
    return info


def is_resource(obj: object) -> bool:
    """Tell whether ``obj`` is an object of a kind (its class has an :class:`ApiInfo`)."""
    return isinstance(getattr(obj, "_api_info", None), ApiInfo)


class _ListMeta(msgspec.Struct):
    resourceVersion: str | None = None  # noqa: N815 (the wire name)
    continue_: str | None = msgspec.field(name="continue", default=None)


_list_types: dict[type[Any], type[msgspec.Struct]] = {}


def _list_type(res: type[Any]) -> type[msgspec.Struct]:
    """A ``<Kind>List`` struct decoding ``items`` straight into ``res`` (made once per kind)."""
    cached = _list_types.get(res)
    if cached is None:
        cached = msgspec.defstruct(
            f"{res.__name__}List",
            [("items", list[res] | None, None), ("metadata", _ListMeta | None, None)],  # type: ignore[valid-type]
        )
        _list_types[res] = cached
    return cached


def decode_object(data: bytes, res: type[R]) -> R:
    """``data`` (one JSON object) as ``res``; ``msgspec.ValidationError`` if it is not one."""
    decoded: R = msgspec.json.decode(data, type=res)
    return decoded


def decode_list(data: bytes, res: type[R]) -> tuple[str | None, str | None, list[R]]:
    """A LIST response as (continue token, resourceVersion, items) (None when the list has no metadata)."""
    decoded: Any = msgspec.json.decode(data, type=_list_type(res))
    meta = decoded.metadata
    items: list[R] = decoded.items or []
    return (meta.continue_ if meta else None), (meta.resourceVersion if meta else None), items
