"""``python -m imexdra_sim.devices.fakefabric CONFIG``: run one node's fabric until SIGTERM.

CONFIG is the JSON file ``service.FabricService.write`` left (docs/fake-fabric.md §2).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from pathlib import Path

from imexdra_sim.devices.fakefabric.server import Fabric, serve
from imexdra_sim.devices.fakefabric.service import FabricService


async def run(config: Path) -> None:
    """Serve the fabric ``config`` describes until the process is told to stop."""
    service = FabricService.read(config)
    fabric = Fabric(node=service.node, domain=service.domain, major=service.major())
    server = await serve(fabric, *service.address)
    logging.info(
        "fabric of %s listening on %s, IMEX channels' major %d, domain %s",
        service.node,
        service.endpoint,
        fabric.major,
        sorted(service.domain) or "(this node only)",
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    async with server:
        await stop.wait()


def main() -> None:
    """Entry point: one argument, the config file."""
    if len(sys.argv) != 2:
        sys.exit("usage: python -m imexdra_sim.devices.fakefabric CONFIG")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    asyncio.run(run(Path(sys.argv[1])))


if __name__ == "__main__":
    main()
