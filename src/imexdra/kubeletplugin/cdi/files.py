"""CDI spec files under the CDI root: rendering as upstream does, atomic writes, removal.

Files are named as the CDI library names transient specs, ``<vendor>-<class>_<id>.yaml`` (``/`` in
the id becomes ``_``): ``k8s.compute-domain.nvidia.com-device_base.yaml`` and
``k8s.compute-domain.nvidia.com-claim_<claimUID>.yaml``. Content is ``---`` plus YAML in the layout
go-yaml v3 produces with a 4-space indent (the upstream writer), so files diff cleanly against
upstream's; mode 0600; written through a dot-prefixed temporary file that CDI scanners ignore.
Like the CDI library upstream uses, writes and removals are atomic but not fsynced: a spec only has
to outlive the plugin process (the page cache does that), and after a reboot every claim is prepared
again and its spec rewritten. A claim UID comes from the kubelet: one that cannot be part of a file
name (a NUL, not UTF-8, longer than a file name may be) is a ``CdiSpecError``, and ``/`` becomes
``_``, so a spec path never leaves the CDI root.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

import yaml

from imexdra.common.files.atomicfile import remove_file, write_atomic
from imexdra.kubeletplugin.cdi.spec import (
    BASE_CLASS,
    BASE_SPEC_ID,
    CDI_VENDOR,
    CLAIM_CLASS,
    CdiSpecError,
    ContainerEdits,
    Spec,
)
from imexdra.kubeletplugin.paths import is_plain_file_name

CDI_FILE_MODE = 0o600
CDI_ROOT_MODE = 0o750

_PLAIN = re.compile(r"[A-Za-z0-9/_.=+-][A-Za-z0-9/_.=:+-]*")
_YAML12_NUMBER = re.compile(
    r"[-+]?(\.[0-9]+|[0-9][0-9_]*(\.[0-9]*)?)([eE][-+]?[0-9]+)?|0x[0-9a-fA-F]+|0o[0-7]+"
)
_RESERVED = frozenset({"y", "n", "yes", "no", "on", "off", "true", "false", "null", "~"})


def spec_file_name(cdi_class: str, spec_id: str) -> str:
    """The file name the CDI library gives a transient spec."""
    return f"{CDI_VENDOR}-{cdi_class}_{spec_id.replace('/', '_')}.yaml"


def base_spec_path(cdi_root: Path) -> Path:
    """``<cdi-root>/k8s.compute-domain.nvidia.com-device_base.yaml``."""
    return cdi_root / spec_file_name(BASE_CLASS, BASE_SPEC_ID)


def claim_spec_path(cdi_root: Path, claim_uid: str) -> Path:
    """``<cdi-root>/k8s.compute-domain.nvidia.com-claim_<claimUID>.yaml``.

    Raises:
        CdiSpecError: the UID cannot be part of a file name (a NUL, not UTF-8, or too long).

    """
    name = spec_file_name(CLAIM_CLASS, claim_uid)
    if not is_plain_file_name(name):
        raise CdiSpecError(f"claim UID {claim_uid!r} cannot name a CDI spec file")
    return cdi_root / name


def ensure_cdi_root(cdi_root: Path) -> None:
    """Create the CDI root (0750) if missing.

    Raises:
        FileExistsError: something that is not a directory is in its place.

    """
    cdi_root.mkdir(mode=CDI_ROOT_MODE, parents=True, exist_ok=True)


async def write_base_spec(cdi_root: Path, spec: Spec) -> Path:
    """(Over)write the base spec, as ``cdi.base_spec`` built and validated it; return its path."""
    return await _write(base_spec_path(cdi_root), spec)


async def write_claim_spec(cdi_root: Path, claim_uid: str, spec: Spec) -> Path:
    """Write one claim's spec, as ``cdi.claim_spec`` built and validated it; return its path."""
    return await _write(claim_spec_path(cdi_root, claim_uid), spec)


async def remove_claim_spec(cdi_root: Path, claim_uid: str) -> bool:
    """Delete one claim's spec; a missing file is fine. Return whether one was deleted."""
    try:
        path = claim_spec_path(cdi_root, claim_uid)
    except CdiSpecError:
        return False  # no spec can have been written for a UID that cannot name a file
    return remove_file(path, durable=False)


def claim_spec_uids(cdi_root: Path) -> list[str]:
    """The claim UIDs of the claim specs under ``cdi_root`` (other files are not ours to read)."""
    suffix = ".yaml"
    prefix = spec_file_name(CLAIM_CLASS, "").removesuffix(suffix)
    if not cdi_root.is_dir():
        return []
    return sorted(
        name[len(prefix) : -len(suffix)]
        for name in (path.name for path in cdi_root.iterdir())
        if name.startswith(prefix) and name.endswith(suffix) and len(name) > len(prefix) + len(suffix)
    )


async def _write(path: Path, spec: Spec) -> Path:
    data = render(spec).encode("utf-8")
    # No fsync: a page-cache write of a few KB is quicker than a hop to a worker thread.
    write_atomic(path, data, mode=CDI_FILE_MODE, durable=False)
    return path


# --- rendering ---------------------------------------------------------------------------------


def render(spec: Spec) -> str:
    """The file content: ``---`` and the spec as YAML, fields in CDI struct order, empty ones omitted."""
    lines = ["---"]
    _mapping(spec_tree(spec), 0, lines, lead=None)
    return "\n".join(lines) + "\n"


def spec_tree(spec: Spec) -> dict[str, Any]:
    """The spec as plain data in CDI struct order (also what the JSON schema tests validate)."""
    tree: dict[str, Any] = {
        "cdiVersion": spec.cdi_version,
        "kind": spec.kind,
        "devices": [{"name": d.name, "containerEdits": _edits_tree(d.container_edits)} for d in spec.devices],
    }
    edits = _edits_tree(spec.container_edits)
    if edits:
        tree["containerEdits"] = edits
    return tree


def _edits_tree(edits: ContainerEdits) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    if edits.env:
        tree["env"] = list(edits.env)
    if edits.device_nodes:
        tree["deviceNodes"] = [
            _without_empty(
                {
                    "path": n.path,
                    "hostPath": n.host_path,
                    "type": n.type,
                    "major": n.major,
                    "minor": n.minor,
                    "fileMode": n.file_mode,
                    "permissions": n.permissions,
                }
            )
            for n in edits.device_nodes
        ]
    if edits.hooks:
        tree["hooks"] = [
            _without_empty(
                {
                    "hookName": h.hook_name,
                    "path": h.path,
                    "args": list(h.args),
                    "env": list(h.env),
                    "timeout": h.timeout,
                }
            )
            for h in edits.hooks
        ]
    if edits.mounts:
        tree["mounts"] = [
            _without_empty(
                {
                    "hostPath": m.host_path,
                    "containerPath": m.container_path,
                    "options": list(m.options),
                    "type": m.type,
                }
            )
            for m in edits.mounts
        ]
    return tree


def _without_empty(fields: dict[str, Any]) -> dict[str, Any]:
    # omitempty: "", [] and nil are left out; 0 only for major/minor (fileMode and timeout are
    # pointers in Go, so a set 0 is written). A zero minor is therefore absent, as in upstream files.
    return {
        key: value
        for key, value in fields.items()
        if value not in ("", [], None) and not (key in ("major", "minor") and value == 0)
    }


def _next_indent(indent: int) -> int:
    # go-yaml v3 aligns nested blocks to the next multiple of the indent width (4), except that a
    # mapping inside a sequence item starts right after "- " (indent + 2).
    return 4 * ((indent + 4) // 4)


def _mapping(tree: dict[str, Any], indent: int, lines: list[str], *, lead: str | None) -> None:
    for position, (key, value) in enumerate(tree.items()):
        prefix = lead if position == 0 and lead is not None else " " * indent
        if isinstance(value, dict) and value:
            lines.append(f"{prefix}{key}:")
            _mapping(value, _next_indent(indent), lines, lead=None)
        elif isinstance(value, list) and value:
            lines.append(f"{prefix}{key}:")
            _sequence(value, _next_indent(indent), lines)
        else:
            lines.append(f"{prefix}{key}: {_scalar(value)}")


def _sequence(items: list[Any], indent: int, lines: list[str]) -> None:
    for item in items:
        if isinstance(item, dict) and item:
            _mapping(item, indent + 2, lines, lead=" " * indent + "- ")
        elif isinstance(item, list) and item:
            raise TypeError("nested sequences do not occur in CDI specs")
        else:
            lines.append(f"{' ' * indent}- {_scalar(item)}")


def _scalar(value: Any) -> str:
    if isinstance(value, dict):
        return "{}"
    if isinstance(value, list):
        return "[]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    text = str(value)
    if _is_plain_safe(text):
        return text
    return json.dumps(text)


@functools.lru_cache(maxsize=4096)
def _is_plain_safe(text: str) -> bool:
    """Whether ``text`` reads back as the same string under YAML 1.1 and 1.2 when left unquoted."""
    if not _PLAIN.fullmatch(text) or text.endswith(":") or text.lower() in _RESERVED:
        return False
    if "/" in text:
        # No YAML 1.1/1.2 implicit type (number, bool, null, timestamp) contains a slash; this keeps
        # the 2048-channel specs of allocationMode All fast to render.
        return True
    if _YAML12_NUMBER.fullmatch(text):
        return False
    return bool(yaml.safe_load(text) == text)
