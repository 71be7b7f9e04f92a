"""Token buckets on an injectable clock, one per (caller, limit): the fakes' rate limiters.

Off unless a test or demo turns them on (`rate_limits` knob): real limits are seconds long,
which would make every other test slow, and clients must cope with 429 from faults anyway.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class Buckets:
    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._state: dict[tuple[str, str], tuple[float, float]] = {}

    def take(self, who: str, limit: str, interval: float, burst: int = 1) -> float:
        """Spend a token; 0.0 when there was one, else the seconds until one is free."""
        now = self.clock()
        with self._lock:
            tokens, last = self._state.get((who, limit), (float(burst), now))
            tokens = min(float(burst), tokens + (now - last) / interval if interval else burst)
            if tokens >= 1.0:
                self._state[(who, limit)] = (tokens - 1.0, now)
                return 0.0
            self._state[(who, limit)] = (tokens, now)
            return (1.0 - tokens) * interval

    def reset(self) -> None:
        with self._lock:
            self._state.clear()
