"""One asyncio timer for many waits: armed for a deadline, re-armed only for a sooner one.

A loop that waits once per burst of requests (the broker's connection) or once per round (the
engine's sender) would otherwise schedule and cancel a timer every time. A wait whose deadline
is later than the armed one is woken early, when that one fires; its owner looks again and
arms the alarm for its own deadline.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class Alarm:
    __slots__ = ("_loop", "_on_fire", "_handle", "_at")

    def __init__(self, loop: asyncio.AbstractEventLoop, on_fire: Callable[[], None]) -> None:
        self._loop = loop
        self._on_fire = on_fire
        self._handle: asyncio.TimerHandle | None = None
        self._at = 0.0

    def arm(self, deadline: float) -> None:
        """Make sure the alarm fires at ``deadline`` (loop time) or sooner."""
        if self._handle is None or self._at > deadline:
            if self._handle is not None:
                self._handle.cancel()
            self._at = deadline
            self._handle = self._loop.call_at(deadline, self._fired)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _fired(self) -> None:
        self._handle = None
        self._on_fire()
