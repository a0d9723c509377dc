"""Process-level helpers of the plugin: the SIGUSR2 stack dump."""

import asyncio
import stat
from pathlib import Path

from imexdra.kubeletplugin.plugin import dump_stacks


async def test_stack_dump_lists_threads_and_tasks(tmp_path: Path) -> None:
    """The dump holds every thread's stack and every asyncio task's, world-readable like upstream's."""
    target = tmp_path / "goroutine-stacks.dump"
    waiter = asyncio.create_task(asyncio.Event().wait(), name="waiting-service")
    await asyncio.sleep(0)
    dump_stacks(target)
    waiter.cancel()
    text = target.read_text()
    assert "Current thread" in text or "Thread 0x" in text
    assert "asyncio task waiting-service" in text
    assert stat.S_IMODE(target.stat().st_mode) == 0o666
