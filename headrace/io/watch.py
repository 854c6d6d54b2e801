"""Records of files that keep appearing and growing: an `UnboundedSource` over a file pattern.

`ReadFromTextContinuously` (textio) and `ReadFromJsonContinuously` (jsonio) read every complete
line of every file matching a pattern, and keep watching it: new files and lines appended to
known files are read as they come (Beam Java's `TextIO.read().watchForNewFiles`; Beam Python
has only `MatchContinuously`, which emits file names). The source's position is the byte
offset of the first unread line of each file, so a re-read between two positions (a replayed
micro-batch after a crash) gives exactly the same records. A line is read only once its
newline is written, so a half-written line waits for its end.

Event time: with `timestamp_fn` (record -> timestamp), each record gets its own time and the
watermark is the largest event time read so far minus `watermark_delay` seconds (Spark's
`withWatermark` rule; records older than that are late); without it, records are stamped with
the processing time at which they were found, which is then the watermark. The source ends
(watermark +infinity) when processing time passes `stop_timestamp`, or when nothing new has
appeared for `stop_after_idle` seconds, once everything found was read.
"""

from __future__ import annotations

import glob
import os
from typing import Any, Callable, Dict, Iterator, List, Optional

from headrace.errors import DataFormatError, InvalidArgumentError
from headrace.io.iobase import UnboundedSource
from headrace.model.time import MAX_TIMESTAMP_MICROS, MIN_TIMESTAMP_MICROS, to_micros
from headrace.model.windowed import TimestampedValue
from headrace.utils.timestamp import Timestamp

__all__ = ["GrowingFilesSource", "SKIP"]

SKIP = object()   # what `decode` returns for a line that is no record (a blank JSON line)

_READ_CHUNK = 1 << 20


class GrowingFilesSource(UnboundedSource):
    """The complete lines of the files matching `pattern`, as they appear (see the module doc).

    `decode(line, path, line_number)` turns a line (str, without its newline) into a record
    (or `SKIP`: no record).
    At most `max_records` lines (the runner's limit) and `max_files` files with new lines are
    taken by one read; files are taken in path order. Position: {"files": {path: offset},
    "lines": {path: lines read}, "max": largest event time read (us), "wm": watermark (us),
    "found": processing time of the last read that found lines (us), "done": ended}.
    """

    def __init__(self, pattern: str, decode: Callable[[str, str, int], Any], name: str,
                 poll_interval: float = 1.0, timestamp_fn: Optional[Callable[[Any], Any]] = None,
                 watermark_delay: float = 0.0, stop_timestamp: Any = None,
                 stop_after_idle: Optional[float] = None, max_files: Optional[int] = None) -> None:
        where = f"{name}({pattern!r})"
        if not isinstance(pattern, (str, os.PathLike)):
            raise InvalidArgumentError(f"{name} needs a file pattern str, got {pattern!r}")
        for arg, value in (("poll_interval", poll_interval), ("watermark_delay", watermark_delay),
                           ("stop_after_idle", stop_after_idle)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or value < 0):
                raise InvalidArgumentError(
                    f"{where}: {arg}={value!r} must be a number of seconds >= 0, e.g. {arg}=1")
        if max_files is not None and (not isinstance(max_files, int) or max_files < 1):
            raise InvalidArgumentError(
                f"{where}: max_files_per_read={max_files!r} must be a positive int (or None: no limit)")
        if timestamp_fn is not None and not callable(timestamp_fn):
            raise InvalidArgumentError(
                f"{where}: timestamp_fn={timestamp_fn!r} is not callable; give a function of a "
                "record returning its event time (seconds, a datetime or a Timestamp)")
        self.pattern = os.fspath(pattern)
        self.decode = decode
        self.name = name
        self.poll_us = int(poll_interval * 1_000_000)
        self.timestamp_fn = timestamp_fn
        self.delay_us = int(watermark_delay * 1_000_000)
        self.stop_us = None if stop_timestamp is None else to_micros(stop_timestamp)
        self.idle_us = None if stop_after_idle is None else int(stop_after_idle * 1_000_000)
        self.max_files = max_files
        self._started_us: Optional[int] = None   # this process's first look (idle time base)
        self._listed_us: Optional[int] = None
        self._listing: List[str] = []

    def display_name(self) -> str:
        return f"{self.name}({self.pattern})"

    def initial_position(self) -> Dict[str, Any]:
        return {"files": {}, "lines": {}, "max": MIN_TIMESTAMP_MICROS, "wm": MIN_TIMESTAMP_MICROS,
                "found": 0, "done": False}

    def _paths(self, now_us: int) -> List[str]:
        if self._listed_us is None or now_us - self._listed_us >= self.poll_us or now_us < self._listed_us:
            self._listing = sorted(p for p in glob.glob(self.pattern) if os.path.isfile(p))
            self._listed_us = now_us
        return self._listing

    def available(self, position: Dict[str, Any], now_us: int, max_records: int) -> Dict[str, Any]:
        if position["done"]:
            return position
        if self._started_us is None:
            self._started_us = now_us
        files = dict(position["files"])
        lines = dict(position["lines"])
        budget = max(1, max_records)
        touched = 0
        largest = position["max"]
        for path in self._paths(now_us):
            if budget <= 0 or (self.max_files is not None and touched >= self.max_files):
                break
            start = files.get(path, 0)
            try:
                size = os.path.getsize(path)
            except OSError:
                continue  # gone between the listing and now: nothing of it was read
            if size < start:
                raise DataFormatError(
                    f"{self.display_name()}: {path} shrank from {start} to {size} bytes after "
                    "its lines were read; the source reads files that only grow (write a new file "
                    "instead of rewriting one)")
            if size == start:
                continue
            end, n, largest = self._scan(path, start, size, budget, lines.get(path, 0), largest)
            if end > start:
                files[path] = end
                lines[path] = lines.get(path, 0) + n
                budget -= n
                touched += 1
        if touched:
            wm = position["wm"]
            if self.timestamp_fn is not None:
                wm = max(wm, largest - self.delay_us) if largest > MIN_TIMESTAMP_MICROS else wm
            else:
                wm = max(wm, now_us)
            return {"files": files, "lines": lines, "max": largest, "wm": wm, "found": now_us,
                    "done": False}
        since = max(position["found"], self._started_us)
        if ((self.stop_us is not None and now_us >= self.stop_us)
                or (self.idle_us is not None and now_us - since >= self.idle_us)):
            return dict(position, done=True)
        return position

    def _scan(self, path: str, start: int, size: int, budget: int, line_no: int,
              largest: int) -> Any:
        """(offset after the last complete line taken, lines taken, largest event time) of the
        lines of `path` from `start`, at most `budget` of them."""
        end, n = start, 0
        with open(path, "rb") as fh:
            fh.seek(start)
            left = size - start
            carry = b""
            while left > 0 and n < budget:
                chunk = fh.read(min(_READ_CHUNK, left))
                if not chunk:
                    break
                left -= len(chunk)
                buf = carry + chunk
                lo = 0
                while n < budget:
                    i = buf.find(b"\n", lo)
                    if i < 0:
                        break
                    if self.timestamp_fn is not None:
                        record = self._decode(buf[lo:i], path, line_no + n + 1)
                        if record is not SKIP:
                            largest = max(largest, self._time_of(record, path, line_no + n + 1))
                    n += 1
                    end += i + 1 - lo
                    lo = i + 1
                carry = buf[lo:]
        return end, n, largest

    def _decode(self, raw: bytes, path: str, line_no: int) -> Any:
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DataFormatError(f"{self.display_name()}: {path} line {line_no} is not UTF-8: "
                                  f"{exc}") from None
        return self.decode(text, path, line_no)

    def _time_of(self, record: Any, path: str, line_no: int) -> int:
        assert self.timestamp_fn is not None
        try:
            return to_micros(self.timestamp_fn(record))
        except Exception as exc:
            raise DataFormatError(
                f"{self.display_name()}: timestamp_fn failed on {path} line {line_no}: "
                f"{type(exc).__name__}: {exc}; make it return seconds, a datetime or a Timestamp "
                "for every record (e.g. a fixed time for records without one)") from exc

    def read(self, start: Dict[str, Any], end: Dict[str, Any]) -> Iterator[TimestampedValue]:
        before = start["files"]
        numbers = start["lines"]
        for path in sorted(end["files"]):
            a, b = before.get(path, 0), end["files"][path]
            if b <= a:
                continue
            line_no = numbers.get(path, 0)
            with open(path, "rb") as fh:
                fh.seek(a)
                data = fh.read(b - a)
            if len(data) != b - a or not data.endswith(b"\n"):
                raise DataFormatError(
                    f"{self.display_name()}: {path} no longer has the bytes {a} to {b} it had "
                    "when they were found; the source reads files that only grow")
            for raw in data[:-1].split(b"\n"):
                line_no += 1
                record = self._decode(raw, path, line_no)
                if record is SKIP:
                    continue
                if self.timestamp_fn is not None:
                    ts = self._time_of(record, path, line_no)
                else:
                    ts = end["found"]
                yield TimestampedValue(record, Timestamp(micros=ts))

    def watermark(self, position: Dict[str, Any]) -> Timestamp:
        if position["done"]:
            return Timestamp(micros=MAX_TIMESTAMP_MICROS)
        return Timestamp(micros=position["wm"])

