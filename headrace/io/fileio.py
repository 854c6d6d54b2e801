"""Beam's `apache_beam.io.fileio`: matching files, once or continuously, and reading matches.

    p | MatchFiles("/data/*.csv") | ReadMatches() | beam.Map(lambda f: f.read_utf8())
    p | MatchContinuously("/incoming/*.json", interval=10, stop_after_idle=600)

`MatchContinuously` (Beam Python's) watches a pattern with `io.watch.Watch`'s splittable DoFn,
unbounded per element, whose restriction is what the watch has seen: each call polls the
pattern, claims the new state, outputs the files not seen before (stamped with the poll's
processing time, which is also its watermark) and checkpoints until the next poll, `interval`
seconds later. It ends at `stop_timestamp` or once no new file appeared for `stop_after_idle`
seconds (Beam Java's `afterTimeSinceNewOutput`).
"""

from __future__ import annotations

import enum
from typing import Any, BinaryIO, Iterator, List, NamedTuple, Optional

from headrace.errors import InvalidArgumentError
from headrace.io.filesystem import BeamIOError, CompressionTypes, FileMetadata
from headrace.io.filesystems import FileSystems
from headrace.io.watch import (
    PollResult, WatchGrowthFn, after_time_since_new_output, after_timestamp, either_of, never,
)
from headrace.model.time import Duration, duration_micros, to_micros
from headrace.pipeline.ptransform import PTransform
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


class _PollPattern:
    """MatchContinuously's poll function: the files matching the pattern now (none before the
    start), stamped with the poll's processing time; without deduplication, each poll's files
    are new ones."""

    def __init__(self, treatment: EmptyMatchTreatment, start_us: Optional[int],
                 deduplicate: bool) -> None:
        self.treatment = treatment
        self.start_us = start_us
        self.deduplicate = deduplicate

    def __call__(self, pattern: str) -> PollResult:
        now = Timestamp.now()
        if self.start_us is not None and now.micros < self.start_us:
            return PollResult.incomplete([], now)
        found: List[Any] = _match(pattern, self.treatment)
        if not self.deduplicate:
            found = [_Polled(m, now.micros) for m in found]
        return PollResult.incomplete(found, now)


class _Polled(NamedTuple):
    """A file as one poll saw it (MatchContinuously without deduplication)."""

    metadata: FileMetadata
    poll_us: int


def _file_key(m: Any) -> Any:
    return m.metadata.path if isinstance(m, _Polled) else m.path


def _file_version(m: Any) -> Any:
    meta = m.metadata if isinstance(m, _Polled) else m
    return (meta.path, meta.last_updated_in_seconds) + ((m.poll_us,) if isinstance(m, _Polled) else ())


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
        start_us = to_micros(start_timestamp) if start_timestamp is not None else None
        termination = never()
        if stop_timestamp is not None:
            termination = after_timestamp(stop_timestamp)
        if stop_after_idle is not None:
            idle = after_time_since_new_output(
                Duration(micros=_positive_micros(stop_after_idle, "stop_after_idle")))
            termination = idle if stop_timestamp is None else either_of(termination, idle)
        self.fn = WatchGrowthFn(
            _PollPattern(empty_match_treatment, start_us, has_deduplication),
            _positive_micros(interval, "interval"), termination,
            _file_key if not match_updated_files else _file_version, with_input=False)
        self.apply_windowing = apply_windowing
        self.has_deduplication = has_deduplication

    def expand(self, pbegin: Any) -> Any:
        from headrace.transforms.core import Create, Map, ParDo, WindowInto
        out = pbegin | "Pattern" >> Create([self.file_pattern]) | "Watch" >> ParDo(self.fn)
        if not self.has_deduplication:
            out = out | "Files" >> Map(lambda polled: polled.metadata)
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
