"""Sharded file output, exactly once, for every file format (text, JSON lines, Parquet).

A write is a composite of runner-agnostic steps: every bundle (or, with `num_shards`, every
shard after a GroupByKey) writes its records to a new temporary file in a hidden directory
next to the output and outputs the file's path; one finalize step, which reads all committed
paths as a side input, renames them atomically to Beam's shard names
`prefix-SSSSS-of-NNNNN suffix`. A failed or retried bundle's temporary file is never
committed, so the output has no duplicates and no partial files; the finalize step then
deletes the temporary directory (and those left by earlier failed runs of the same output)
and the shards of an earlier run that the new shards did not replace, so a re-run, even with
fewer shards, leaves exactly its own shards.

An unbounded input is written per window and pane instead (Beam's windowed writes): each pane
of a GroupByKey on a shard number becomes one file per shard, named after the window, the pane
and the shard, written to a temporary file and renamed at once.

A format plugs in by subclassing `FileBasedSink` and implementing `new_writer`, which returns
a `FileFormatWriter` for one open temporary file.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import shutil
import uuid
import zlib
from abc import ABC, abstractmethod
from typing import Any, BinaryIO, Iterable, List, Optional, Tuple, cast

from headrace.errors import InvalidArgumentError
from headrace.io.filesystem import compressing_writer, compression_of
from headrace.io.localfilesystem import local_pattern
from headrace.model.time import MIN_TIMESTAMP_MICROS, Duration
from headrace.model.strategy import AccumulationMode
from headrace.model.window import (GLOBAL_WINDOWS_TUPLE, GlobalWindow, GlobalWindows,
                                   NonMergingWindowFn)
from headrace.model.windowed import WindowedValue
from headrace.pipeline.dofn import DoFn
from headrace.pipeline.pvalue import AsList, PCollection
from headrace.transforms.core import Create, GroupByKey, ParDo, WindowInto

DEFAULT_SHARD_NAME_TEMPLATE = "-SSSSS-of-NNNNN"
_TEMP_DIR_PREFIX = ".headrace-temp-"


class FileFormatWriter(ABC):
    """Writes the records of one file format to an open binary file `fh` (the sink owns the file).

    An abstract base class: `write` is abstract; `finish` and `abandon` default to nothing.
    """

    def __init__(self, fh: BinaryIO) -> None:
        self.fh = fh

    @abstractmethod
    def write(self, record: Any) -> None:
        """Writes one record."""
        raise NotImplementedError

    def finish(self) -> None:
        """Writes what the format still holds back (buffered rows, a footer); the file stays open."""

    def abandon(self) -> None:
        """Releases what the format holds after a failed attempt (its file is then deleted)."""


class _CountingWriter:
    """Passes writes on to `fh` and counts their bytes (the uncompressed size of a shard)."""

    def __init__(self, fh: Any) -> None:
        self.fh = fh
        self.bytes_written = 0

    def write(self, data: bytes) -> int:
        """Writes `data` and counts it."""
        self.bytes_written += len(data)
        return self.fh.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.fh, name)


class _TempFile:
    """One temporary output file: the raw file, its (compressing) stream, the format writer."""

    def __init__(self, sink: "FileBasedSink") -> None:
        os.makedirs(sink.temp_dir, exist_ok=True)
        self.sink = sink
        self.path = os.path.join(sink.temp_dir, f"{uuid.uuid4().hex}.tmp")
        self.raw = open(self.path, "wb")
        self.fh = compressing_writer(self.raw, sink.compression)
        self.max_bytes = sink.max_bytes_per_shard or 0
        self.counter = _CountingWriter(self.fh) if self.max_bytes else None
        self.writer = sink.new_writer(cast(BinaryIO, self.counter or self.fh))
        self.records = 0

    def write(self, record: Any) -> None:
        """Writes one record through the format writer."""
        self.writer.write(record)
        self.records += 1

    def at_capacity(self) -> bool:
        """Whether the file reached the sink's max_records_per_shard or max_bytes_per_shard."""
        sink = self.sink
        return bool((sink.max_records_per_shard and self.records >= sink.max_records_per_shard)
                    or (self.counter is not None and self.counter.bytes_written >= self.max_bytes))

    def close(self) -> str:
        """Finishes the format, closes the file and returns its path."""
        self.writer.finish()
        self.fh.close()
        if self.raw is not self.fh:
            self.raw.close()
        return self.path

    def discard(self) -> None:
        """Closes and deletes the file of a failed attempt (best effort: finalize removes it anyway)."""
        for close in (self.writer.abandon, self.fh.close, self.raw.close):
            try:
                close()
            except Exception:
                pass
        try:
            os.remove(self.path)
        except OSError:
            pass


def _positive_or_none(transform: str, name: str, value: Any) -> Optional[int]:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidArgumentError(f"{transform}({name}=...) must be a positive int or None, got {value!r}")
    return value


def check_shard_name_template(transform: str, template: str) -> None:
    """Raises InvalidArgumentError unless `template` is '' or has an S run and no U, W or V run."""
    if not isinstance(template, str):
        raise InvalidArgumentError(
            f"{transform}(shard_name_template=...) must be a str, got {template!r}")
    if template and not re.search("S+", template):
        raise InvalidArgumentError(
            f"{transform}(shard_name_template={template!r}) has no shard number (a run of S); use "
            "e.g. '-SSSSS-of-NNNNN', or '' for a single file")
    found = sorted(set(re.findall("[UWV]", template)))
    if found:
        raise InvalidArgumentError(
            f"{transform}(shard_name_template={template!r}) uses the placeholder(s) "
            f"{', '.join(found)} (Beam's uuid U and window W / V), which headrace does not fill in; "
            "use only S (shard number) and N (shard count), e.g. '-SSSSS-of-NNNNN'")


class FileBasedSink(ABC):
    """Where a write puts its files and how: shard names, shard count, compression, format writer.

    `max_records_per_shard` / `max_bytes_per_shard` roll a bundle's file over to a new one when
    it reaches that many records / uncompressed bytes (so they need `num_shards=0`, as a fixed
    shard count decides the files itself); `skip_if_empty` writes no file for an empty input
    (earlier runs' shards are still removed).

    An abstract base class: a format defines `new_writer`.
    """

    def __init__(self, transform: str, file_path_prefix: Any, file_name_suffix: str = "",
                 num_shards: int = 0, shard_name_template: Optional[str] = None,
                 compression_type: str = "auto", *, max_records_per_shard: Optional[int] = None,
                 max_bytes_per_shard: Optional[int] = None, skip_if_empty: bool = False) -> None:
        if not isinstance(file_path_prefix, (str, os.PathLike)) or not os.fspath(file_path_prefix):
            raise InvalidArgumentError(
                f"{transform} needs a non-empty file path prefix, got {file_path_prefix!r}")
        if not isinstance(num_shards, int) or num_shards < 0:
            raise InvalidArgumentError(f"num_shards must be a non-negative int, got {num_shards!r}")
        if not isinstance(file_name_suffix, str):
            raise InvalidArgumentError(f"file_name_suffix must be a str, got {file_name_suffix!r}")
        self.max_records_per_shard = _positive_or_none(transform, "max_records_per_shard",
                                                       max_records_per_shard)
        self.max_bytes_per_shard = _positive_or_none(transform, "max_bytes_per_shard",
                                                     max_bytes_per_shard)
        self.skip_if_empty = bool(skip_if_empty)
        if shard_name_template is None:
            shard_name_template = DEFAULT_SHARD_NAME_TEMPLATE
        check_shard_name_template(transform, shard_name_template)
        if shard_name_template == "":
            num_shards = 1
        if num_shards and (self.max_records_per_shard or self.max_bytes_per_shard):
            given = "num_shards" if shard_name_template else "shard_name_template=''"
            raise InvalidArgumentError(
                f"{transform}: max_records_per_shard / max_bytes_per_shard cannot be combined with "
                f"{given}: a fixed number of shards decides the files itself (Beam ignores the "
                "limits then); drop one of the two")
        self.step = transform  # set to the write's full label when it is applied
        self.prefix = local_pattern(transform, os.fspath(file_path_prefix))
        self.suffix = file_name_suffix
        self.template = shard_name_template
        self.num_shards = num_shards
        self.compression = compression_of(self.suffix or self.prefix, compression_type)
        self.out_dir = os.path.dirname(os.path.abspath(self.prefix))
        key = hashlib.sha1("\0".join([os.path.abspath(self.prefix), self.template, self.suffix])
                           .encode("utf-8")).hexdigest()[:12]
        self._temp_dir_prefix = f"{_TEMP_DIR_PREFIX}{key}-"
        self.temp_dir = os.path.join(self.out_dir, self._temp_dir_prefix + uuid.uuid4().hex)

    @abstractmethod
    def new_writer(self, fh: BinaryIO) -> FileFormatWriter:
        """The format writer for one newly opened temporary file."""
        raise NotImplementedError

    def shard_name(self, index: int, count: int) -> str:
        """The final name of shard `index` of `count`, e.g. `prefix-00001-of-00004.suffix`."""
        def repl(m: "re.Match[str]") -> str:
            s = m.group(0)
            return str(index if s[0] == "S" else count).zfill(len(s))
        return self.prefix + re.sub(r"S+|N+", repl, self.template) + self.suffix

    def windowed_shard_name(self, window: Any, pane: Any, index: int, count: int) -> str:
        """The final name of shard `index` of `count` of one pane of one window (unbounded
        input), Beam's windowed-write name: `prefix-START-END-PANE-00000-of-00001.suffix`, START
        and END in ISO 8601 (left out for the global window), PANE the pane's index (left out
        when the pane is the window's only one)."""
        parts = [self.prefix]
        if not isinstance(window, GlobalWindow):
            parts += [window.start.to_utc_datetime().replace(tzinfo=None).isoformat(),
                      window.end.to_utc_datetime().replace(tzinfo=None).isoformat()]
        if pane is not None and not (pane.is_first and pane.is_last):
            parts.append(str(pane.index))
        head = "-".join(parts)

        def repl(m: "re.Match[str]") -> str:
            s = m.group(0)
            return str(index if s[0] == "S" else count).zfill(len(s))
        return head + re.sub(r"S+|N+", repl, self.template) + self.suffix

    def _shard_pattern(self) -> "re.Pattern[str]":
        """Matches the base names of this output's shards, whatever their index and count."""
        parts = re.split(r"(S+|N+)", self.template)  # literals at even, S/N runs at odd indices
        body = "".join(r"\d+" if i % 2 else re.escape(p) for i, p in enumerate(parts))
        return re.compile(re.escape(os.path.basename(self.prefix)) + body + re.escape(self.suffix) + "$")

    def finalize(self, temp_paths: List[str]) -> List[str]:
        """Renames the committed temporary files to the shard names; returns the final names."""
        paths = sorted(temp_paths)
        wanted = 0 if self.skip_if_empty and not paths else max(1, self.num_shards)
        while len(paths) < wanted:  # empty shards still get their files
            paths.append(_TempFile(self).close())
        n = len(paths)
        finals = []
        for i, tmp in enumerate(paths):
            final = self.shard_name(i, n)
            os.makedirs(os.path.dirname(final) or ".", exist_ok=True)
            if os.path.exists(tmp) or not os.path.exists(final):  # (else renamed by an earlier attempt)
                os.replace(tmp, final)
            finals.append(final)
        self._remove_stale(finals)
        return finals

    def _remove_stale(self, finals: List[str]) -> None:
        """Deletes earlier runs' shards not replaced by `finals`, and all temporary directories."""
        shard_dir = os.path.dirname(os.path.abspath(self.shard_name(0, 1)))
        keep = {os.path.abspath(f) for f in finals}
        pattern = self._shard_pattern()
        for name in os.listdir(shard_dir):
            path = os.path.join(shard_dir, name)
            if pattern.match(name) and path not in keep and os.path.isfile(path):
                os.remove(path)
        shutil.rmtree(self.temp_dir, ignore_errors=True)
        for name in os.listdir(self.out_dir):  # left by earlier runs of this output that failed
            if name.startswith(self._temp_dir_prefix):
                shutil.rmtree(os.path.join(self.out_dir, name), ignore_errors=True)


class _WriteBundlesDoFn(DoFn):
    """Writes each bundle to its own temporary file and outputs the file's path."""

    def __init__(self, sink: FileBasedSink) -> None:
        self.sink = sink
        self.temp: Optional[_TempFile] = None

    def start_bundle(self) -> None:
        self._discard()

    def process(self, element: Any) -> Iterable[str]:
        if self.temp is None:
            self.temp = _TempFile(self.sink)
        self.temp.write(element)
        if self.temp.at_capacity():  # max_records_per_shard / max_bytes_per_shard: a new file
            path = self.temp.close()
            self.temp = None
            yield path

    def finish_bundle(self) -> Iterable[WindowedValue]:
        if self.temp is not None:
            path = self.temp.close()
            self.temp = None
            yield WindowedValue(path, MIN_TIMESTAMP_MICROS, GLOBAL_WINDOWS_TUPLE)

    def teardown(self) -> None:
        self._discard()

    def _discard(self) -> None:
        if self.temp is not None:  # a failed attempt: its temp file is never committed
            self.temp.discard()
            self.temp = None


class _AssignShardDoFn(DoFn):
    def __init__(self, n: int) -> None:
        self.n = n
        self.i = 0

    def start_bundle(self) -> None:
        self.i = random.randrange(self.n)

    def process(self, element: Any) -> Iterable[Tuple[int, Any]]:
        self.i = (self.i + 1) % self.n
        yield (self.i, element)


class _WriteShardDoFn(DoFn):
    """Writes one shard's grouped elements to a temporary file and outputs its path."""

    def __init__(self, sink: FileBasedSink) -> None:
        self.sink = sink

    def process(self, element: Any) -> Iterable[str]:
        yield _write_temp(self.sink, element[1])


def _write_temp(sink: FileBasedSink, values: Iterable[Any]) -> str:
    """Writes `values` to a new temporary file of `sink` (deleted if writing fails); its path."""
    temp = _TempFile(sink)
    try:
        write = temp.write
        for v in values:
            write(v)
        return temp.close()
    except BaseException:
        temp.discard()
        raise


class _FinalizeDoFn(DoFn):
    """Renames the committed temporary files to their final shard names (see FileBasedSink)."""

    def __init__(self, sink: FileBasedSink) -> None:
        self.sink = sink

    def process(self, _: Any, temp_paths: List[str]) -> Iterable[str]:
        return self.sink.finalize(temp_paths)


class _SameWindows(NonMergingWindowFn):
    """Keeps each element in the window it is already in: the windowed write groups the panes
    it is given by shard without merging windows (session windows of different keys under one
    shard stay apart) or accumulating them again."""

    def assign(self, assign_context: Any) -> List[Any]:
        return [assign_context.window]


class _StableShardDoFn(DoFn):
    """Keys each record by a shard chosen from its text, so a re-run pane splits the same way."""

    def __init__(self, n: int) -> None:
        self.n = n

    def process(self, element: Any) -> Iterable[Tuple[int, Any]]:
        yield (zlib.crc32(repr(element).encode("utf-8")) % self.n if self.n > 1 else 0, element)


class _WriteWindowedShardDoFn(DoFn):
    """Writes one shard of one pane of one window to a temporary file, then renames it to its
    final name (`FileBasedSink.windowed_shard_name`) at once: a pane computed again (a re-run
    streaming batch) replaces the file whole, so there are no partial or duplicate files."""

    def __init__(self, sink: FileBasedSink, n: int) -> None:
        self.sink = sink
        self.n = n

    def process(self, element: Any, w: Any = DoFn.WindowParam,
                pane: Any = DoFn.PaneInfoParam) -> Iterable[str]:
        shard, values = element
        path = _write_temp(self.sink, values)
        final = self.sink.windowed_shard_name(w, pane, shard, self.n)
        os.makedirs(os.path.dirname(final) or ".", exist_ok=True)
        os.replace(path, final)
        yield final


def write_files(pcoll: PCollection, sink: FileBasedSink) -> PCollection:
    """Applies the write steps for `sink` inside the calling composite; returns the final file names.

    A bounded input is written once, to `num_shards` shards (see the module doc); an unbounded
    one per window and pane, as each pane fires (Beam's windowed writes: `windowed_shard_name`)."""
    sink.step = pcoll.pipeline.current_transform().full_label or sink.step
    if not pcoll.is_bounded:
        if sink.max_records_per_shard or sink.max_bytes_per_shard:
            raise InvalidArgumentError(
                f"{sink.step}: max_records_per_shard / max_bytes_per_shard apply to bounded input; "
                "an unbounded PCollection is written per window and pane, to num_shards files "
                "each (default 1): drop the limits or set num_shards")
        n = max(1, sink.num_shards)
        w = pcoll.windowing
        # each pane the input carries is written once, to the files of its window: the write's
        # own grouping keeps the windows and the trigger, and discards what it fired
        return (pcoll
                | "KeepWindows" >> WindowInto(
                    _SameWindows(), trigger=w.trigger,
                    accumulation_mode=AccumulationMode.DISCARDING,
                    timestamp_combiner=w.timestamp_combiner,
                    allowed_lateness=Duration(micros=w.allowed_lateness_us),
                    closing_behavior=w.closing_behavior, on_time_behavior=w.on_time_behavior)
                | "AssignShard" >> ParDo(_StableShardDoFn(n))
                | "GroupByShard" >> GroupByKey()
                | "WriteWindowedShards" >> ParDo(_WriteWindowedShardDoFn(sink, n)))
    glob_pc = pcoll | "WindowIntoGlobal" >> WindowInto(GlobalWindows())
    if sink.num_shards:
        temp = (glob_pc
                | "AssignShard" >> ParDo(_AssignShardDoFn(sink.num_shards))
                | "GroupByShard" >> GroupByKey()
                | "WriteShards" >> ParDo(_WriteShardDoFn(sink)))
    else:
        temp = glob_pc | "WriteBundles" >> ParDo(_WriteBundlesDoFn(sink))
    return (pcoll.pipeline
            | "FinalizeTrigger" >> Create([None])
            | "Finalize" >> ParDo(_FinalizeDoFn(sink), AsList(temp)))
