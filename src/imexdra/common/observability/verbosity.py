"""klog's ``--vmodule``: per-file verbosity, parsed and matched without loading the logging stack.

A pattern is a glob on the name of the file a line is logged from, without ``.py`` (``reconciler=6``),
as klog's is on the Go file name; a pattern with ``/`` matches as many trailing path parts
(``controller/*=5``). The first matching pattern wins.
"""

from __future__ import annotations

import fnmatch
from pathlib import PurePath

from imexdra.common.errors import ConfigError

VModule = tuple[tuple[str, int], ...]


def parse_vmodule(spec: str) -> VModule:
    """``pattern=N,...`` as (pattern, level) pairs; ``ConfigError`` naming the item if malformed."""
    pairs: list[tuple[str, int]] = []
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        pattern, equals, level = item.rpartition("=")
        if not equals or not pattern or not level.isdigit():
            raise ConfigError(f'"{item}" is not pattern=N (e.g. reconciler=6)', field="vmodule")
        pairs.append((pattern.removesuffix(".py"), int(level)))
    return tuple(pairs)


def module_level(vmodule: VModule, path: str) -> int | None:
    """The level the first pattern matching source file ``path`` gives, or None."""
    source = PurePath(path)
    parts = [*source.parts[:-1], source.stem]
    for pattern, level in vmodule:
        depth = pattern.count("/") + 1
        if fnmatch.fnmatchcase("/".join(parts[-depth:]), pattern):
            return level
    return None
