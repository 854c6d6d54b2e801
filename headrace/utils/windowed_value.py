"""Beam's `apache_beam.utils.windowed_value`: WindowedValue built from seconds, and PaneInfo."""

from __future__ import annotations

from typing import Any, Iterable, Optional

from headrace.model import windowed as _w
from headrace.model.time import to_micros
from headrace.model.windowed import PANE_INFO_UNKNOWN, PaneInfo, PaneInfoTiming


class WindowedValue(_w.WindowedValue):
    """A value with timestamp (seconds, datetime or Timestamp), windows and pane, for user code."""

    __slots__ = ()

    def __init__(self, value: Any, timestamp: Any, windows: Iterable[Any],
                 pane_info: Optional[PaneInfo] = None) -> None:
        super().__init__(value, to_micros(timestamp), tuple(windows),
                         pane_info if pane_info is not None else PANE_INFO_UNKNOWN)


__all__ = ["PANE_INFO_UNKNOWN", "PaneInfo", "PaneInfoTiming", "WindowedValue"]
