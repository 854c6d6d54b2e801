"""Watching things grow: Beam's `Watch` (a splittable DoFn polling each input), and the
records of files that keep appearing and growing (an `UnboundedSource` over a file pattern).

`Watch(poll_fn, poll_interval, termination)` (Beam's `io.watch`, and Beam Java's
`Watch.growthOf`) calls `poll_fn(input)` every `poll_interval` for each input element, emits
each output it has not emitted before, and stops when the poll says it is complete or the
termination condition (`never()`, `after_total_of(d)`, `after_time_since_new_output(d)`,
`after_timestamp(t)`, `either_of(a, b)`) fires.
`fileio.MatchContinuously` is a Watch of a file pattern.

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
from typing import (
    Any, Callable, Dict, FrozenSet, Iterable, Iterator, List, NamedTuple, Optional, Sequence, Tuple,
)

from headrace.errors import DataFormatError, InvalidArgumentError, UnsupportedArgumentError
from headrace.io.iobase import UnboundedSource
from headrace.io.watermark_estimators import ManualWatermarkEstimator
from headrace.model.time import (
    MAX_TIMESTAMP_MICROS, MIN_TIMESTAMP_MICROS, Duration, duration_micros, to_micros,
)
from headrace.model.windowed import TimestampedValue
from headrace.pipeline.dofn import DoFn
from headrace.pipeline.ptransform import PTransform
from headrace.pipeline.splittable import RestrictionProgress, RestrictionProvider, RestrictionTracker
from headrace.utils.timestamp import Timestamp

__all__ = ["GrowingFilesSource", "PollFn", "PollResult", "SKIP", "TerminationCondition", "Watch",
           "after_time_since_new_output", "after_timestamp", "after_total_of", "either_of", "never"]

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



# ---- Watch: a growing set of outputs per input, polled (Beam's `io.watch`) --------------------


class PollResult:
    """What one poll found: its outputs (TimestampedValues) and, optionally, a watermark (no
    later output of this input is earlier); `complete(...)` ends the input's polling."""

    def __init__(self, outputs: Sequence[TimestampedValue], watermark: Optional[Timestamp] = None
                 ) -> None:
        self.outputs = tuple(outputs)
        self.watermark = watermark

    @property
    def is_complete(self) -> bool:
        """True when the poll said no more outputs will come."""
        return self.watermark is not None and self.watermark.micros >= MAX_TIMESTAMP_MICROS

    @staticmethod
    def _stamped(outputs: Iterable[Any], timestamp: Any) -> List[TimestampedValue]:
        stamp = Timestamp.now() if timestamp is None else Timestamp.of(timestamp)
        return [o if isinstance(o, TimestampedValue) else TimestampedValue(o, stamp) for o in outputs]

    @staticmethod
    def incomplete(outputs: Iterable[Any], timestamp: Any = None) -> "PollResult":
        """Outputs (plain values stamped with `timestamp`, else now), more to come; the
        watermark is the earliest new output's time."""
        return PollResult(PollResult._stamped(outputs, timestamp))

    @staticmethod
    def complete(outputs: Iterable[Any], timestamp: Any = None) -> "PollResult":
        """The last outputs of the input: polling stops and its watermark is released."""
        return PollResult(PollResult._stamped(outputs, timestamp),
                          Timestamp(micros=MAX_TIMESTAMP_MICROS))

    def with_watermark(self, watermark: Any) -> "PollResult":
        """The same outputs with an explicit watermark."""
        return PollResult(self.outputs, Timestamp.of(watermark))

    def __repr__(self) -> str:
        return f"PollResult({list(self.outputs)!r}, watermark={self.watermark})"


class PollFn:
    """An optional base class of poll functions (`input -> PollResult`)."""

    def __call__(self, element: Any) -> PollResult:
        raise NotImplementedError(f"{type(self).__name__} must implement __call__(element)")

    def default_output_coder(self) -> Any:
        """A coder for the outputs (unused by headrace, which pickles its state)."""
        return None


class TerminationCondition:
    """When to stop polling one input; its state is immutable and travels with the watch."""

    def for_new_input(self, now: Timestamp, element: Any) -> Any:
        """The state of a new input."""
        raise NotImplementedError(f"{type(self).__name__} must implement for_new_input")

    def on_seen_new_output(self, now: Timestamp, state: Any) -> Any:
        """The state after a poll found a new output."""
        return state

    def on_poll_complete(self, state: Any) -> Any:
        """The state after a poll."""
        return state

    def can_stop_polling(self, now: Timestamp, state: Any) -> bool:
        """True when polling the input should stop."""
        raise NotImplementedError(f"{type(self).__name__} must implement can_stop_polling")

    def state_coder(self) -> Any:
        """A coder of the state (unused by headrace, which pickles its state)."""
        return None


class _Never(TerminationCondition):
    def for_new_input(self, now: Timestamp, element: Any) -> Any:
        return None

    def can_stop_polling(self, now: Timestamp, state: Any) -> bool:
        return False


class _AfterTotalOf(TerminationCondition):
    def __init__(self, micros: int) -> None:
        self.micros = micros

    def for_new_input(self, now: Timestamp, element: Any) -> int:
        return now.micros

    def can_stop_polling(self, now: Timestamp, state: int) -> bool:
        return now.micros - state > self.micros


class _AfterTimeSinceNewOutput(TerminationCondition):
    def __init__(self, micros: int) -> None:
        self.micros = micros

    def for_new_input(self, now: Timestamp, element: Any) -> int:
        return now.micros

    def on_seen_new_output(self, now: Timestamp, state: int) -> int:
        return now.micros

    def can_stop_polling(self, now: Timestamp, state: int) -> bool:
        return now.micros - state >= self.micros


def never() -> TerminationCondition:
    """Polls until the poll function returns `PollResult.complete(...)`."""
    return _Never()


def after_total_of(duration: Any) -> TerminationCondition:
    """Stops polling an input `duration` (a Duration or seconds) after it was first seen."""
    return _AfterTotalOf(duration_micros(duration))


def after_time_since_new_output(duration: Any) -> TerminationCondition:
    """Stops polling an input once no new output was seen for `duration` (Beam Java's
    `afterTimeSinceNewOutput`)."""
    return _AfterTimeSinceNewOutput(duration_micros(duration))


class GrowthState(NamedTuple):
    """A watched input's restriction: the termination state, the keys of the outputs it has
    emitted, and whether it has ended."""

    termination: Any
    seen: FrozenSet[bytes]
    done: bool = False


class GrowthTracker(RestrictionTracker):
    """Claims the successive states of a watch, one per poll (Beam's growth tracker): claiming a
    `done` state ends it (the claim fails); a split ends the primary where it is and leaves the
    rest of the watch, from the current state, as the residual."""

    def __init__(self, restriction: GrowthState) -> None:
        self._state = restriction
        self._finished = restriction.done
        self._split = False

    def current_restriction(self) -> GrowthState:
        return self._state

    def current_progress(self) -> RestrictionProgress:
        return RestrictionProgress(completed=float(len(self._state.seen)), remaining=1.0)

    def try_claim(self, position: GrowthState) -> bool:
        if self._finished or self._split:
            return False
        self._state = position
        if position.done:
            self._finished = True
            return False
        return True

    def try_split(self, fraction_of_remainder: float) -> Optional[Tuple[GrowthState, GrowthState]]:
        if self._finished or self._split:
            return None
        self._split = True
        return self._state._replace(done=True), self._state

    def check_done(self) -> None:
        if not (self._finished or self._split):
            raise ValueError("the watch neither ended nor checkpointed before process returned")

    def is_bounded(self) -> bool:
        return self._finished or self._split


def _key_bytes(key: Any) -> bytes:
    from headrace.model.coders import encode_key
    try:
        return encode_key(key)
    except Exception:
        import hashlib
        import pickle
        return b"p" + hashlib.sha256(pickle.dumps(key)).digest()


class WatchGrowthFn(DoFn, RestrictionProvider):
    """Watch's splittable DoFn (see `Watch`): one input's polls, unbounded per element."""

    def __init__(self, poll_fn: Callable[[Any], PollResult], poll_interval_us: int,
                 termination: TerminationCondition, output_key_fn: Optional[Callable[[Any], Any]],
                 with_input: bool = True) -> None:
        self.poll_fn = poll_fn
        self.poll_interval_us = poll_interval_us
        self.termination = termination
        self.output_key_fn = output_key_fn
        self.with_input = with_input

    def initial_restriction(self, element: Any) -> GrowthState:
        return GrowthState(self.termination.for_new_input(Timestamp.now(), element), frozenset())

    def create_tracker(self, restriction: GrowthState) -> GrowthTracker:
        return GrowthTracker(restriction)

    def restriction_size(self, element: Any, restriction: GrowthState) -> float:
        return 1.0

    def truncate(self, element: Any, restriction: GrowthState) -> None:
        return None  # a drained watch stops

    @DoFn.unbounded_per_element()
    def process(self, element: Any, tracker: Any = DoFn.RestrictionParam(),
                estimator: Any = DoFn.WatermarkEstimatorParam(
                    ManualWatermarkEstimator.default_provider())) -> Iterator[Any]:
        now = Timestamp.now()
        state: GrowthState = tracker.current_restriction()
        if state.done:
            return  # an ended primary (split off before its poll): polling would lose the result
        result = self.poll_fn(element)
        if not isinstance(result, PollResult):
            raise InvalidArgumentError(
                f"Watch's poll function returned {result!r}; return a PollResult, e.g. "
                "PollResult.incomplete(outputs)")
        key_fn = self.output_key_fn
        new, seen = [], set(state.seen)
        for out in result.outputs:
            kb = _key_bytes(out.value if key_fn is None else key_fn(out.value))
            if kb not in seen:
                seen.add(kb)
                new.append(out)
        term = state.termination
        if new:
            term = self.termination.on_seen_new_output(now, term)
        term = self.termination.on_poll_complete(term)
        if not tracker.try_claim(GrowthState(term, frozenset(seen))):
            return
        for out in new:
            yield TimestampedValue((element, out.value) if self.with_input else out.value,
                                   out.timestamp)
        watermark = result.watermark
        if watermark is None and new:
            watermark = min(out.timestamp for out in new)
        if watermark is not None:
            current = estimator.current_watermark()
            wm = Timestamp(micros=min(watermark.micros, MAX_TIMESTAMP_MICROS))
            if current is None or wm > current:
                estimator.set_watermark(wm)
        if result.is_complete or self.termination.can_stop_polling(Timestamp.now(), term):
            tracker.try_claim(GrowthState(term, frozenset(seen), True))
            return
        tracker.defer_remainder(Duration(micros=self.poll_interval_us))


class Watch(PTransform):
    """For each input, the outputs of `poll_fn(input)` (a PollResult) polled every
    `poll_interval` (a Duration or seconds) until `termination` says stop or a poll is complete,
    each output emitted once (deduplicated by `output_key_fn(output)`, the output itself by
    default) as an `(input, output)` pair at its timestamp; unbounded (Beam's `io.watch.Watch`).
    A splittable DoFn, unbounded per element, whose restriction is what the watch has seen."""

    def __init__(self, poll_fn: Callable[[Any], PollResult], poll_interval: Any,
                 termination: Optional[TerminationCondition] = None, output_coder: Any = None,
                 output_key_fn: Optional[Callable[[Any], Any]] = None,
                 output_key_coder: Any = None, timestamp_cursor: bool = False,
                 allowed_lateness: Any = 0, now_fn: Any = None) -> None:
        super().__init__()
        if poll_interval is None:
            raise InvalidArgumentError("Watch requires a poll_interval (a Duration or seconds)")
        if not callable(poll_fn):
            raise InvalidArgumentError(f"Watch needs a poll function, got {poll_fn!r}")
        if timestamp_cursor or now_fn is not None:
            raise UnsupportedArgumentError(
                "Watch(timestamp_cursor=..., now_fn=...) is not supported by headrace: its watch "
                "keeps the key of every output it emitted, and reads the runner's clock")
        self.fn = WatchGrowthFn(poll_fn, duration_micros(poll_interval), termination or never(),
                                output_key_fn)

    def expand(self, pcoll: Any) -> Any:
        from headrace.transforms.core import ParDo
        return pcoll | "WatchGrowth" >> ParDo(self.fn)


class _EitherOf(TerminationCondition):
    def __init__(self, first: TerminationCondition, second: TerminationCondition) -> None:
        self.first, self.second = first, second

    def for_new_input(self, now: Timestamp, element: Any) -> Tuple[Any, Any]:
        return self.first.for_new_input(now, element), self.second.for_new_input(now, element)

    def on_seen_new_output(self, now: Timestamp, state: Tuple[Any, Any]) -> Tuple[Any, Any]:
        return (self.first.on_seen_new_output(now, state[0]),
                self.second.on_seen_new_output(now, state[1]))

    def on_poll_complete(self, state: Tuple[Any, Any]) -> Tuple[Any, Any]:
        return self.first.on_poll_complete(state[0]), self.second.on_poll_complete(state[1])

    def can_stop_polling(self, now: Timestamp, state: Tuple[Any, Any]) -> bool:
        return (self.first.can_stop_polling(now, state[0])
                or self.second.can_stop_polling(now, state[1]))


class _AfterTimestamp(TerminationCondition):
    def __init__(self, micros: int) -> None:
        self.micros = micros

    def for_new_input(self, now: Timestamp, element: Any) -> None:
        return None

    def can_stop_polling(self, now: Timestamp, state: Any) -> bool:
        return now.micros >= self.micros


def either_of(first: TerminationCondition, second: TerminationCondition) -> TerminationCondition:
    """Stops polling when either condition would (Beam Java's `eitherOf`)."""
    return _EitherOf(first, second)


def after_timestamp(timestamp: Any) -> TerminationCondition:
    """Stops polling once processing time reaches `timestamp`."""
    return _AfterTimestamp(to_micros(timestamp))
