"""Beam's `apache_beam.io.fileio`: matching files, once or continuously, and reading matches.

    p | MatchFiles("/data/*.csv") | ReadMatches() | beam.Map(lambda f: f.read_utf8())
    p | MatchContinuously("/incoming/*.json", interval=10, stop_after_idle=600)

`MatchContinuously` watches a pattern (Beam Java's `Watch.growthOf`, Beam Python's
`MatchContinuously`): a splittable DoFn, unbounded per element, whose restriction is what the
watch has seen; each call polls the pattern, claims the new state, outputs the files not seen
before (stamped with the poll's processing time, which is also its watermark) and checkpoints
until the next poll, `interval` seconds later. It ends at `stop_timestamp` or once no new file
appeared for `stop_after_idle` seconds (Beam Java's `afterTimeSinceNewOutput`).
"""

from __future__ import annotations

import enum
from typing import Any, BinaryIO, FrozenSet, Iterator, List, NamedTuple, Optional

from headrace.errors import InvalidArgumentError
from headrace.io.filesystem import BeamIOError, CompressionTypes, FileMetadata
from headrace.io.filesystems import FileSystems
from headrace.io.watermark_estimators import ManualWatermarkEstimator
from headrace.model.time import MAX_TIMESTAMP_MICROS, Duration, duration_micros, to_micros
from headrace.model.windowed import TimestampedValue
from headrace.pipeline.dofn import DoFn
from headrace.pipeline.ptransform import PTransform
from headrace.pipeline.splittable import RestrictionProgress, RestrictionProvider, RestrictionTracker
from headrace.utils.timestamp import Timestamp

__all__ = ["EmptyMatchTreatment", "MatchAll", "MatchContinuously", "MatchFiles", "ReadMatches",
           "ReadableFile"]


class EmptyMatchTreatment(enum.Enum):
    """What a pattern that matches nothing means (Beam's names)."""

    ALLOW = "ALLOW"                          # nothing: no error
    DISALLOW = "DISALLOW"                    # an error
    ALLOW_IF_WILDCARD = "ALLOW_IF_WILDCARD"  # an error unless the pattern has a wildcard

    @staticmethod
    def allow_empty_match(pattern: str, treatment: "EmptyMatchTreatment") -> bool:
        """Whether `pattern` may match nothing under `treatment`."""
        if treatment is EmptyMatchTreatment.ALLOW:
            return True
        if treatment is EmptyMatchTreatment.ALLOW_IF_WILDCARD:
            return any(c in pattern for c in "*?[")
        return False


def _match(pattern: str, treatment: EmptyMatchTreatment) -> List[FileMetadata]:
    """The files matching `pattern`, in path order; an empty match is an error unless allowed."""
    found = sorted(FileSystems.match([pattern])[0].metadata_list, key=lambda m: m.path)
    if not found and not EmptyMatchTreatment.allow_empty_match(pattern, treatment):
        raise BeamIOError(
            f"no file matches {pattern!r} (empty_match_treatment={treatment.name}); check the "
            "pattern, or pass empty_match_treatment=EmptyMatchTreatment.ALLOW")
    return found


class MatchAll(PTransform):
    """Each input file pattern's matching files, as FileMetadata."""

    def __init__(self, empty_match_treatment: EmptyMatchTreatment = EmptyMatchTreatment.ALLOW
                 ) -> None:
        super().__init__()
        self.empty_match_treatment = empty_match_treatment

    def expand(self, pcoll: Any) -> Any:
        from headrace.transforms.core import FlatMap
        treatment = self.empty_match_treatment
        return pcoll | "Match" >> FlatMap(lambda pattern: _match(pattern, treatment))


class MatchFiles(PTransform):
    """The files matching one pattern, as FileMetadata (a root transform)."""

    def __init__(self, file_pattern: str,
                 empty_match_treatment: EmptyMatchTreatment = EmptyMatchTreatment.ALLOW_IF_WILDCARD
                 ) -> None:
        super().__init__()
        if not isinstance(file_pattern, str):
            raise InvalidArgumentError(f"MatchFiles needs a file pattern str, got {file_pattern!r}")
        self.file_pattern = file_pattern
        self.empty_match_treatment = empty_match_treatment

    def expand(self, pbegin: Any) -> Any:
        from headrace.transforms.core import Create
        return (pbegin | "Pattern" >> Create([self.file_pattern])
                | "MatchAll" >> MatchAll(self.empty_match_treatment))


class ReadableFile:
    """A matched file to read (Beam's ReadableFile): `metadata`, `open()`, `read()`, `read_utf8()`."""

    def __init__(self, metadata: FileMetadata,
                 compression: str = CompressionTypes.AUTO) -> None:
        self.metadata = metadata
        self.compression = compression

    def open(self, mime_type: str = "text/plain",
             compression_type: Optional[str] = None) -> BinaryIO:
        """The file, open for reading bytes (decompressed by its suffix unless told otherwise)."""
        return FileSystems.open(self.metadata.path, mime_type,
                                compression_type or self.compression)

    def read(self, mime_type: str = "application/octet-stream") -> bytes:
        """The file's whole content."""
        with self.open(mime_type) as fh:
            return fh.read()

    def read_utf8(self) -> str:
        """The file's whole content, decoded as UTF-8."""
        return self.read().decode("utf-8")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ReadableFile) and self.metadata == other.metadata

    def __hash__(self) -> int:
        return hash(self.metadata)

    def __repr__(self) -> str:
        return f"ReadableFile({self.metadata!r})"


class ReadMatches(PTransform):
    """FileMetadata (or paths) to ReadableFile; directories are skipped (Beam's default)."""

    def __init__(self, compression: str = CompressionTypes.AUTO, skip_directories: bool = True
                 ) -> None:
        super().__init__()
        self.compression = compression
        self.skip_directories = skip_directories

    def expand(self, pcoll: Any) -> Any:
        from headrace.transforms.core import FlatMap
        compression, skip = self.compression, self.skip_directories

        def readable(m: Any) -> Iterator[ReadableFile]:
            meta = m if isinstance(m, FileMetadata) else FileSystems.match([m])[0].metadata_list[0]
            if skip and meta.path.endswith(("/", "\\")):
                return
            yield ReadableFile(meta, compression)
        return pcoll | "ReadMatches" >> FlatMap(readable)


# ---- watching a pattern: a splittable DoFn ------------------------------------------------


class WatchState(NamedTuple):
    """A watched pattern's restriction: the keys of the files it output, the processing time
    of the last poll that found a new one (None before the first poll), and whether it ended."""

    seen: FrozenSet[Any]
    last_new_us: Optional[int]
    done: bool


class WatchTracker(RestrictionTracker):
    """Claims the successive states of a watch (Beam Java's GrowthTracker): each claim is the
    state after a poll; claiming a `done` state ends the watch (that claim fails, as a claim
    past the end does). A split leaves the primary ended where it is and the rest of the watch
    (from the current state) as the residual."""

    def __init__(self, restriction: WatchState) -> None:
        self._state = restriction
        self._finished = restriction.done
        self._split = False

    def current_restriction(self) -> WatchState:
        return self._state

    def current_progress(self) -> RestrictionProgress:
        return RestrictionProgress(completed=float(len(self._state.seen)), remaining=1.0)

    def try_claim(self, position: WatchState) -> bool:
        if self._finished or self._split:
            return False
        if position.done:
            self._state = position
            self._finished = True
            return False
        self._state = position
        return True

    def try_split(self, fraction_of_remainder: float) -> Optional[tuple]:
        if self._finished or self._split:
            return None
        self._split = True
        return self._state._replace(done=True), self._state

    def check_done(self) -> None:
        if not (self._finished or self._split):
            raise InvalidArgumentError(
                "the watch neither ended (claim a done state) nor checkpointed "
                "(tracker.defer_remainder) before process returned")

    def is_bounded(self) -> bool:
        return self._finished or self._split


class _WatchProvider(RestrictionProvider):
    def initial_restriction(self, element: Any) -> WatchState:
        return WatchState(frozenset(), None, False)

    def create_tracker(self, restriction: WatchState) -> WatchTracker:
        return WatchTracker(restriction)

    def restriction_size(self, element: Any, restriction: WatchState) -> float:
        return 1.0

    def truncate(self, element: Any, restriction: WatchState) -> None:
        return None  # a drained watch stops


class WatchFn(DoFn):
    """MatchContinuously's splittable DoFn: polls an input file pattern (see the module doc)."""

    def __init__(self, interval_us: int, has_deduplication: bool, start_us: int,
                 stop_us: int, match_updated_files: bool, treatment: EmptyMatchTreatment,
                 idle_us: Optional[int]) -> None:
        self.interval_us = interval_us
        self.has_deduplication = has_deduplication
        self.start_us = start_us
        self.stop_us = stop_us
        self.match_updated_files = match_updated_files
        self.treatment = treatment
        self.idle_us = idle_us

    def _key(self, m: FileMetadata) -> Any:
        return (m.path, m.last_updated_in_seconds) if self.match_updated_files else m.path

    @DoFn.unbounded_per_element()
    def process(self, pattern: str, tracker: Any = DoFn.RestrictionParam(_WatchProvider()),
                estimator: Any = DoFn.WatermarkEstimatorParam(
                    ManualWatermarkEstimator.default_provider())) -> Iterator[TimestampedValue]:
        now_us = Timestamp.now().micros
        state: WatchState = tracker.current_restriction()
        if now_us < self.start_us:
            tracker.defer_remainder(Timestamp(micros=self.start_us))
            return
        last_new = now_us if state.last_new_us is None else state.last_new_us
        if now_us >= self.stop_us or (self.idle_us is not None and now_us - last_new >= self.idle_us):
            tracker.try_claim(state._replace(done=True))
            return
        found = _match(pattern, self.treatment)
        new = [m for m in found if not self.has_deduplication or self._key(m) not in state.seen]
        seen = state.seen | {self._key(m) for m in new} if self.has_deduplication else state.seen
        fresh = [m for m in new if self._key(m) not in state.seen]
        if not tracker.try_claim(WatchState(frozenset(seen), now_us if fresh else last_new, False)):
            return
        stamp = Timestamp(micros=now_us)
        for m in new:
            yield TimestampedValue(m, stamp)
        estimator.set_watermark(stamp)  # the next poll's files are stamped later
        tracker.defer_remainder(Duration(micros=self.interval_us))


class MatchContinuously(PTransform):
    """The files matching `file_pattern`, watched every `interval` seconds (Beam's
    MatchContinuously; see the module doc); `stop_after_idle` (seconds, headrace's) ends the
    watch once no new file appeared for that long."""

    def __init__(self, file_pattern: str, interval: float = 360.0, has_deduplication: bool = True,
                 start_timestamp: Any = None, stop_timestamp: Any = None,
                 match_updated_files: bool = False, apply_windowing: bool = False,
                 empty_match_treatment: EmptyMatchTreatment = EmptyMatchTreatment.ALLOW,
                 stop_after_idle: Optional[float] = None) -> None:
        super().__init__()
        if not isinstance(file_pattern, str):
            raise InvalidArgumentError(
                f"MatchContinuously needs a file pattern str, got {file_pattern!r}")
        self.file_pattern = file_pattern
        self.interval = interval
        self.fn = WatchFn(
            _positive_micros(interval, "interval"), has_deduplication,
            to_micros(start_timestamp) if start_timestamp is not None else 0,
            to_micros(stop_timestamp) if stop_timestamp is not None else MAX_TIMESTAMP_MICROS,
            match_updated_files, empty_match_treatment,
            None if stop_after_idle is None else _positive_micros(stop_after_idle, "stop_after_idle"))
        self.apply_windowing = apply_windowing

    def expand(self, pbegin: Any) -> Any:
        from headrace.transforms.core import Create, ParDo, WindowInto
        out = pbegin | "Pattern" >> Create([self.file_pattern]) | "Watch" >> ParDo(self.fn)
        if self.apply_windowing:
            from headrace.model.window import FixedWindows
            out = out | "ApplyWindowing" >> WindowInto(FixedWindows(self.interval))
        return out


def _positive_micros(seconds: Any, what: str) -> int:
    try:
        micros = duration_micros(seconds)
    except Exception:
        micros = -1
    if micros <= 0:
        raise InvalidArgumentError(
            f"MatchContinuously({what}={seconds!r}) must be a positive number of seconds")
    return micros
