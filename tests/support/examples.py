"""What the example files' pods must show, shared by the e2e test that applies them and the unit check."""

from __future__ import annotations

#: The files of examples/ holding a ComputeDomain and one pod that lists its channels with ``ls -la``,
#: and the channels it must list (the seeds' multi-pod files are applied through ``seedworkloads``
#: above; tests/unit/test_examples.py checks that every file is one or the other).
CHANNEL_EXAMPLES = {
    "channel-injection.yaml": [0],
    "channel-injection-all.yaml": list(range(2048)),
    "imex-workload.yaml": [0],
}
