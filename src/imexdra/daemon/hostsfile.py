"""The daemon's managed block in a hosts file: ``compute-domain-daemon-NNNN`` → peer IP.

In DNS-names mode nvidia-imex resolves its static node list through the hosts file, so membership
changes are hosts-file rewrites plus SIGUSR1. The file belongs to the pod (the kubelet bind-mounts a
per-pod ``/etc/hosts``), but on a simulated node several daemons may share one host, hence the path is
configurable.

Rules, upstream's minus its quirks (docs/compatibility.md §3.3):

- every line mentioning ``compute-domain-daemon-`` is ours and is dropped (a stale or user line must
  not shadow a mapping), every other line is kept verbatim;
- the managed block is one header line followed by ``IP<TAB>name`` lines sorted by name; the header is
  not repeated on each rewrite and lines are not re-trimmed;
- the file is rewritten in place (a bind-mounted file cannot be replaced by rename) and only when its
  content changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from imexdra.daemon.imexconfig import DNS_NAME_PREFIX

HEADER = "# Compute Domain Daemon mappings"


def render_hosts(existing: str, mapping: Mapping[str, str]) -> str:
    """``existing`` hosts-file text with our block replaced by ``mapping`` (name → IP)."""
    kept = [line for line in existing.splitlines() if DNS_NAME_PREFIX not in line and line != HEADER]
    while kept and not kept[-1].strip():
        kept.pop()
    block = [HEADER, *(f"{mapping[name]}\t{name}" for name in sorted(mapping))] if mapping else []
    lines = [*kept, *([""] if kept and block else []), *block]
    return "\n".join(lines) + "\n" if lines else ""


def managed_mappings(text: str) -> dict[str, str]:
    """The name → IP mappings of our block found in hosts-file ``text``."""
    mapping: dict[str, str] = {}
    for line in text.splitlines():
        fields = line.split("#", 1)[0].split()
        if len(fields) >= 2 and fields[1].startswith(DNS_NAME_PREFIX):
            mapping[fields[1]] = fields[0]
    return mapping


def update_hosts_file(path: Path, mapping: Mapping[str, str]) -> bool:
    """Make ``path``'s managed block equal ``mapping``; tell whether the file changed.

    Blocking: async callers use ``asyncio.to_thread``. A missing file is created (mode 0644).
    """
    try:
        existing: str | None = path.read_text()
    except FileNotFoundError:
        existing = None
    wanted = render_hosts(existing or "", mapping)
    if wanted == existing:
        return False
    with path.open("w") as hosts:
        hosts.write(wanted)
    if existing is None:
        path.chmod(0o644)
    return True
