"""Helpers over int64 columns of the fast path: one sort key of two columns (`band`), a running
maximum per key (`running_max_end`), and the narrow form a column is pickled in (`narrowed`,
`widened`)."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from headrace.runners.spark.fastpath.evaluate import _TIME_GUARD

__all__ = ["band", "running_max_end", "narrowed", "widened"]


def band(code: np.ndarray, value: np.ndarray) -> Optional[np.ndarray]:
    """code * span + (value - min) as one int64 sort key, when that cannot overflow."""
    lo, hi = int(value.min()), int(value.max())
    span = hi - lo + 1
    if (int(code.max()) + 1) * span >= _TIME_GUARD:
        return None
    return code * span + (value - lo)


def running_max_end(code: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per row (sorted by key code, then start): the largest end among that key's rows so far.

    Each key's ends are laid in a band of their own (code * span + end - min), so that one
    running maximum over all rows serves every key; ends are ranked first if bands would
    overflow."""
    banded = band(code, end)
    if banded is not None:
        lo = int(end.min())
        span = int(end.max()) - lo + 1
        return np.maximum.accumulate(banded) - code * span + lo
    times = np.unique(end)
    span = len(times) + 1
    rank = np.searchsorted(times, end).astype(np.int64)
    run = np.maximum.accumulate(code * span + rank)
    return times[run - code * span]


_NARROW = (np.uint8, np.uint16, np.uint32)
_SAFE = 1 << 62      # columns within +-2**62 subtract one from the other without overflow


def narrowed(values: np.ndarray, ref: Optional[np.ndarray] = None) -> Any:
    """An int64 column for pickling: (least value, offsets from it as uint8/16/32, whether `ref`
    was subtracted first); the column itself when it is not int64, is empty or spans more."""
    if values.dtype != np.int64 or not len(values):
        return values
    if ref is not None:
        if not (-_SAFE < int(values.min()) and int(values.max()) < _SAFE
                and -_SAFE < int(ref.min()) and int(ref.max()) < _SAFE):
            ref = None
        else:
            values = values - ref
    lo = int(values.min())
    span = int(values.max()) - lo
    for t in _NARROW:
        if span <= np.iinfo(t).max:
            return lo, (values - lo).astype(t), ref is not None
    return values if ref is None else values + ref


def widened(column: Any, ref: Optional[np.ndarray] = None) -> np.ndarray:
    """The int64 column `narrowed` packed (`ref` the column it subtracted, if it did)."""
    if isinstance(column, np.ndarray):
        return column
    lo, offsets, relative = column
    values = offsets.astype(np.int64)
    values += lo
    if relative:
        assert ref is not None
        values += ref
    return values
