"""One simulated node's fabric as a running service: its config file and its command line.

A node's fabric (``server.Fabric``) runs beside its host IMEX, as a node process of the rack
(docs/fake-fabric.md §2). ``FabricService`` is what it needs to know, written to one JSON file in the
node's simulated host files: the node's name, where it listens (the node's IMEX address), where the
other fabrics of its IMEX domain listen, and the node's ``/proc/devices``, from which it reads the IMEX
channels' major. ``service_argv`` starts ``python -m imexdra_sim.devices.fakefabric`` with that file.

Not product code: on real hardware this is the GPU driver and the IMEX daemons.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from imexdra.devices.procfs import IMEX_CHANNELS_DEVICE, read_char_device_major

CONFIG_NAME = "fake-fabric.json"


@dataclass(frozen=True, slots=True)
class FabricService:
    """Where one node's fabric listens, the fabrics of its IMEX domain, and its ``/proc/devices``."""

    node: str
    address: tuple[str, int]
    domain: Mapping[str, tuple[str, int]]
    """Every *other* node of the IMEX domain → its fabric's address."""
    proc_devices: Path

    @property
    def endpoint(self) -> str:
        """``host:port``, as the probe's ``--fabric`` takes it."""
        return f"{self.address[0]}:{self.address[1]}"

    def major(self) -> int:
        """The IMEX channels' character-device major on this node."""
        return read_char_device_major(self.proc_devices, IMEX_CHANNELS_DEVICE)

    def write(self, path: Path) -> Path:
        """Write this service's config to ``path`` (replacing it); return ``path``."""
        path.write_text(
            json.dumps(
                {
                    "node": self.node,
                    "address": list(self.address),
                    "domain": {name: list(address) for name, address in self.domain.items()},
                    "proc_devices": str(self.proc_devices),
                },
                indent=2,
            )
        )
        return path

    @classmethod
    def read(cls, path: Path) -> FabricService:
        """The service whose config ``write`` left at ``path``."""
        raw = json.loads(path.read_text())
        host, port = raw["address"]
        return cls(
            node=raw["node"],
            address=(host, int(port)),
            domain={name: (peer[0], int(peer[1])) for name, peer in raw["domain"].items()},
            proc_devices=Path(raw["proc_devices"]),
        )


def service_argv(config: Path) -> list[str]:
    """Run the fabric of the node whose config is ``config``."""
    return [sys.executable, "-m", "imexdra_sim.devices.fakefabric", str(config)]
