"""Processing time on the local runner: the system clock, or a virtual one a TestStream moves."""

from __future__ import annotations

import time


class RealClock:
    """Processing time from the system clock, in microseconds since the epoch."""

    def now(self) -> int:
        """The current processing time."""
        return time.time_ns() // 1000


class VirtualClock:
    """Processing time that starts at 0 and moves only when a TestStream advances it."""

    def __init__(self) -> None:
        self.now_us = 0

    def now(self) -> int:
        """The current processing time."""
        return self.now_us

    def advance(self, micros: int) -> None:
        """Moves processing time forward by `micros`."""
        self.now_us += micros
