"""Named one-shot timers on the running event loop (the shape of Kafka's coordinator timer).

Scheduling a key that is already scheduled replaces the old timer, so "the heartbeat deadline of
member M" or "the join deadline of group G" is always one timer that each event pushes back.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Hashable

logger = logging.getLogger("kipproducer.broker.groups")


class KeyedTimers:
    def __init__(self) -> None:
        self._handles: dict[Hashable, asyncio.TimerHandle] = {}

    def schedule(self, key: Hashable, delay_ms: float, callback: Callable[[], None]) -> None:
        """Run ``callback`` after ``delay_ms`` unless rescheduled or cancelled first.

        Must be called from the event loop thread (uses the running loop).
        """
        self.cancel(key)
        loop = asyncio.get_running_loop()
        self._handles[key] = loop.call_later(max(delay_ms, 0) / 1000.0, self._fire, key, callback)

    def cancel(self, key: Hashable) -> None:
        handle = self._handles.pop(key, None)
        if handle is not None:
            handle.cancel()

    def cancel_all(self) -> None:
        for handle in self._handles.values():
            handle.cancel()
        self._handles.clear()

    def __contains__(self, key: Hashable) -> bool:
        return key in self._handles

    def __len__(self) -> int:
        return len(self._handles)

    def _fire(self, key: Hashable, callback: Callable[[], None]) -> None:
        self._handles.pop(key, None)
        try:
            callback()
        except Exception:
            # a timer has no caller to report to; keep the loop (and the other groups) going
            logger.exception("group coordinator timer %r failed", key)
