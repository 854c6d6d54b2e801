"""Process settings for running elements, the same in every runner's process or worker."""

from __future__ import annotations

import gc
from typing import Tuple


def relax_gc() -> Tuple[int, int, int]:
    """Collects cyclic garbage less often; returns the thresholds to restore.

    Elements are many small acyclic objects: frequent cyclic-GC passes over them cost more than
    the work itself (they halve a combine's throughput)."""
    t = gc.get_threshold()
    gc.set_threshold(max(t[0], 100_000), max(t[1], 50), max(t[2], 50))
    return t
