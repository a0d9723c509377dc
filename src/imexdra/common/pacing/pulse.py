"""``Pulse``: "something changed" for waiters that must not miss a change made while they were busy.

A waiter notes ``generation`` before it looks at the state, and later waits with
``wait_past(generation, within)``: it returns at once if a change was fired since, otherwise when the
next one is fired or ``within`` seconds have passed. A plain ``asyncio.Event`` would lose a change
fired between the look and the wait. The kubelet plugin's prepare retries wake on ComputeDomain
changes this way (docs/errors.md §3.3).
"""

from __future__ import annotations

import asyncio


class Pulse:
    """A change counter with waiting; ``fire`` from the event loop's thread only."""

    def __init__(self) -> None:
        self.generation = 0
        self._event = asyncio.Event()

    def fire(self) -> None:
        """Record a change and wake every waiter."""
        self.generation += 1
        self._event.set()
        self._event = asyncio.Event()

    async def wait_past(self, generation: int, within: float) -> bool:
        """Wait until a change after ``generation`` (True) or for ``within`` seconds (False)."""
        if self.generation != generation:
            return True
        event = self._event
        try:
            async with asyncio.timeout(within):
                await event.wait()
        except TimeoutError:
            return False
        return True
