"""Text files: `ReadFromText` (parallel byte-range splits) and `WriteToText` (temp files, atomic rename).

Both take Beam's `coder` (see `headrace.coders`): ReadFromText decodes each line's bytes with
it (default `StrUtf8Coder`), WriteToText writes the bytes it encodes (default `ToBytesCoder`:
bytes as they are, anything else as `str(value)` in UTF-8). A JSON coder thus reads and
writes JSON lines.
"""

from __future__ import annotations

import os
from typing import Any, BinaryIO, Iterable, Iterator, List, Optional, Tuple

from headrace.errors import DataFormatError, InvalidArgumentError, _short_repr
from headrace.io.filebasedsink import FileBasedSink, FileFormatWriter, write_files
from headrace.io.filesystem import (
    check_compression_type, check_files_exist, compression_of, match_files, open_for_read,
)
from headrace.io.iobase import BoundedSource, Read
from headrace.io.watch import GrowingFilesSource
from headrace.model.coders import StrUtf8Coder, ToBytesCoder
from headrace.pipeline.ptransform import PTransform
from headrace.pipeline.pvalue import PCollection

_SPLIT_BYTES = 64 * 1024 * 1024
_MIN_SPLIT_BYTES = 1024 * 1024
_CHUNK = 1024 * 1024


def check_coder(transform: str, coder: Any, method: str, default: Any) -> Any:
    """`coder` (or `default` when None) if it has a callable `method`, else InvalidArgumentError."""
    if coder is None:
        return default
    if isinstance(coder, type):
        raise InvalidArgumentError(
            f"{transform}(coder={coder.__name__}) got a class; pass an instance: "
            f"coder={coder.__name__}()")
    if isinstance(coder, (str, bytes)) or not callable(getattr(coder, method, None)):
        raise InvalidArgumentError(
            f"{transform}(coder=...) needs a coder with a {method}() method, such as "
            f"headrace.coders.StrUtf8Coder() or a subclass of headrace.coders.Coder, got "
            f"{type(coder).__name__} {_short_repr(coder, 80)}")
    return coder


def _check_delimiter(delimiter: Any, escapechar: Any) -> None:
    if delimiter is not None:
        if not isinstance(delimiter, bytes) or not delimiter:
            raise InvalidArgumentError(
                f"ReadFromText(delimiter=...) must be non-empty bytes such as b'|', got {delimiter!r}")
        if any(delimiter[:i] == delimiter[-i:] for i in range(1, len(delimiter))):
            raise InvalidArgumentError(
                f"ReadFromText(delimiter={delimiter!r}) overlaps itself (a prefix of it is also its "
                "suffix), so where a record ends would be ambiguous; choose another delimiter")
    if escapechar is not None and not (isinstance(escapechar, bytes) and len(escapechar) == 1):
        raise InvalidArgumentError(
            f"ReadFromText(escapechar=...) must be a single byte such as b'\\\\', got {escapechar!r}")


class _TextSource(BoundedSource):
    """Lines of the files matching a glob, split into byte ranges (whole files if compressed).

    With a custom `delimiter` or an `escapechar`, records are found by scanning whole files
    (no byte-range splits): a delimiter preceded by an odd number of escape bytes is part of
    the record, and escape bytes are kept, as in Beam.
    """

    transform = "ReadFromText"

    def __init__(self, pattern: str, strip_trailing_newlines: bool = True, skip_header_lines: int = 0,
                 compression_type: str = "auto", validate: bool = True, coder: Any = None,
                 min_bundle_size: int = 0, delimiter: Optional[bytes] = None,
                 escapechar: Optional[bytes] = None) -> None:
        if not isinstance(skip_header_lines, int) or skip_header_lines < 0:
            raise InvalidArgumentError(
                f"skip_header_lines must be a non-negative int, got {skip_header_lines!r}")
        if not isinstance(min_bundle_size, int) or min_bundle_size < 0:
            raise InvalidArgumentError(f"min_bundle_size must be a non-negative int, got {min_bundle_size!r}")
        _check_delimiter(delimiter, escapechar)
        self.pattern = pattern
        self.strip = bool(strip_trailing_newlines)
        self.skip = skip_header_lines
        self.compression_type = check_compression_type(compression_type)
        self.coder = check_coder(self.transform, coder, "decode", StrUtf8Coder())
        self.min_bundle_size = min_bundle_size
        self.delimiter = delimiter
        self.escapechar = escapechar
        if validate:
            check_files_exist(self.transform, pattern, "data/*.txt")

    def _files(self) -> List[str]:
        return match_files(self.pattern)

    def display_name(self) -> str:
        return f"text {self.pattern}"

    def output_type(self) -> Any:
        """The type of the values read (None when the coder does not say)."""
        hint = getattr(self.coder, "to_type_hint", None)
        return hint() if callable(hint) else None

    def split(self, desired_parallelism: int) -> List[Tuple[str, int, int]]:
        files = self._files()
        if not files:
            raise FileNotFoundError(f"no files match {self.pattern!r}")
        total = sum(os.path.getsize(f) for f in files)
        target = max(_MIN_SPLIT_BYTES, self.min_bundle_size,
                     min(_SPLIT_BYTES, total // max(1, desired_parallelism) + 1))
        whole = self.skip or self.delimiter is not None or self.escapechar is not None
        parts: List[Tuple[str, int, int]] = []
        for f in files:
            size = os.path.getsize(f)
            if whole or compression_of(f, self.compression_type) or size <= target:
                parts.append((f, 0, -1))
                continue
            for start in range(0, size, target):
                parts.append((f, start, min(size, start + target)))
        return parts

    def read(self, part: Tuple[str, int, int]) -> Iterable[Any]:
        for block in self._blocks(part):
            yield from block

    def read_batches(self, part: Tuple[str, int, int], size: int) -> Iterable[List[Any]]:
        """The lines of one part in lists of about `size` (whole buffers of the file: lines are
        split and decoded a buffer at a time)."""
        if type(self).read is not _TextSource.read:  # a subclass's records (ReadFromJson's values)
            yield from super().read_batches(part, size)
            return
        pending: List[Any] = []
        for block in self._blocks(part):
            if not pending and len(block) >= size:
                yield block
                continue
            pending.extend(block)
            if len(pending) >= size:
                yield pending
                pending = []
        if pending:
            yield pending

    def _blocks(self, part: Tuple[str, int, int]) -> Iterator[List[Any]]:
        """The decoded records of a part, a list per buffer read."""
        coder = self.coder
        fast = type(coder) is StrUtf8Coder
        decode = coder.decode
        if self.delimiter is not None or self.escapechar is not None:
            block: List[Any] = []
            for k, raw in enumerate(self._records(part)):
                try:
                    block.append(raw.decode("utf-8") if fast else decode(raw))
                except Exception as exc:
                    raise self._undecodable(part, k, raw, exc) from None
                if len(block) >= 1024:
                    yield block
                    block = []
            if block:
                yield block
            return
        k = 0  # the index in the part of the block's first line
        for data in self._line_buffers(part):
            if fast:
                try:
                    lines: List[Any] = data.decode("utf-8").split("\n")
                except UnicodeDecodeError:
                    lines = []  # find and report the undecodable line below
                else:
                    ended = data.endswith(b"\n")
                    if ended:
                        lines.pop()  # empty: after the last newline
                    if self.strip:
                        if b"\r" in data:  # a CR before the newline goes too (not on a last line without one)
                            tail = [] if ended else lines[-1:]
                            lines = [ln[:-1] if ln[-1:] == "\r" else ln
                                     for ln in (lines if ended else lines[:-1])] + tail
                    elif ended:
                        lines = [ln + "\n" for ln in lines]
                    else:  # the file's last line, without a newline, stays so
                        lines = [ln + "\n" for ln in lines[:-1]] + lines[-1:]
                    yield lines
                    k += len(lines)
                    continue
            ended = data.endswith(b"\n")
            raws = data.split(b"\n")
            if ended:
                raws.pop()
            out: List[Any] = []
            for j, raw in enumerate(raws):
                if ended or j < len(raws) - 1:  # the line had a newline
                    if not self.strip:
                        raw += b"\n"
                    elif raw[-1:] == b"\r":
                        raw = raw[:-1]
                try:
                    out.append(raw.decode("utf-8") if fast else decode(raw))
                except Exception as exc:
                    raise self._undecodable(part, k + j, raw, exc) from None
            yield out
            k += len(out)

    def _line_buffers(self, part: Tuple[str, int, int]) -> Iterator[bytes]:
        """The part's lines as buffers of whole lines, each ending in b'\\n' but perhaps the
        file's last line; header lines skipped."""
        path, start, end = part
        with open_for_read(path, compression_of(path, self.compression_type)) as fh:
            base = start  # the file offset of `rest` (then `data`): where the next line starts
            if start > 0:
                fh.seek(start - 1)
                skipped = fh.readline()  # finish the line that straddles the split start
                base = start - 1 + len(skipped)
            skip = self.skip if start == 0 else 0
            rest = b""
            while True:
                if end >= 0 and base >= end:  # the next line starts at or after the part's end
                    return
                chunk = fh.read(_CHUNK)
                last = not chunk
                data = rest + chunk if rest else chunk
                if last:
                    if not data:
                        return
                    cut = len(data)
                else:
                    cut = data.rfind(b"\n") + 1
                if end >= 0 and base + cut > end:
                    # the lines that start before `end`: up to the first newline at or after end - 1
                    nl = data.find(b"\n", max(0, end - 1 - base))
                    if 0 <= nl < cut:
                        cut = nl + 1
                        last = True
                rest = data[cut:]
                data = data[:cut]
                base += cut
                while skip and data:
                    nl = data.find(b"\n")
                    data = data[nl + 1:] if nl >= 0 else b""
                    skip -= 1
                if data:
                    yield data
                if last:
                    return

    def _records(self, part: Tuple[str, int, int]) -> Iterator[bytes]:
        """The raw records of a part (without their line end or delimiter when stripping)."""
        path, start, end = part
        with open_for_read(path, compression_of(path, self.compression_type)) as fh:
            if self.delimiter is not None or self.escapechar is not None:
                records: Iterator[bytes] = _scan(fh, self.delimiter, self.escapechar, self.strip)
                skip = self.skip
                for raw in records:
                    if skip:
                        skip -= 1
                        continue
                    yield raw
                return
            strip = self.strip
            pos = start
            if start > 0:
                fh.seek(start - 1)
                skipped = fh.readline()  # finish the line that straddles the split start
                pos = start - 1 + len(skipped)
            skip = self.skip if start == 0 else 0
            while end < 0 or pos < end:
                raw = fh.readline()
                if not raw:
                    break
                pos += len(raw)
                if skip:
                    skip -= 1
                    continue
                if strip and raw.endswith(b"\n"):
                    raw = raw[:-2] if raw.endswith(b"\r\n") else raw[:-1]
                yield raw

    def line_number(self, part: Tuple[str, int, int], k: int) -> int:
        """The 1-based line (record) number in its file of the part's `k`-th record."""
        path, start, _ = part
        n = k + 1 + (self.skip if start == 0 else 0)
        if start > 0:  # the part's first line follows the newline at or after byte start - 1
            n += 1 + _count_newlines(path, start - 1)
        return n

    def _undecodable(self, part: Tuple[str, int, int], k: int, raw: bytes, exc: Exception
                     ) -> DataFormatError:
        what = "record" if self.delimiter is not None else "line"
        return DataFormatError(
            f"{self.transform}: {part[0]} {what} {self.line_number(part, k)} could not be decoded by "
            f"its coder {self.coder!r} ({type(exc).__name__}: {exc}): {_short_repr(raw, 120)}. Fix "
            f"or remove that {what}, or read with a coder that accepts it (coder=...)")


def _count_newlines(path: str, end: int) -> int:
    """The number of b'\\n' in the first `end` bytes of the (uncompressed) file `path`."""
    count = 0
    with open(path, "rb") as fh:
        while end > 0:
            chunk = fh.read(min(end, _CHUNK))
            if not chunk:
                break
            count += chunk.count(b"\n")
            end -= len(chunk)
    return count


def _escaped(buf: bytes, i: int, start: int, esc: int) -> bool:
    """Whether the byte at `i` follows an odd number of escape bytes (looking back to `start`)."""
    n = 0
    while i - 1 - n >= start and buf[i - 1 - n] == esc:
        n += 1
    return n % 2 == 1


def _scan(fh: BinaryIO, delimiter: Optional[bytes], escapechar: Optional[bytes], strip: bool
          ) -> Iterator[bytes]:
    """The records of `fh` split at `delimiter` (default: '\\n', also ending '\\r\\n') not escaped."""
    delim = delimiter if delimiter is not None else b"\n"
    esc = escapechar[0] if escapechar is not None else None
    n = len(delim)
    buf = b""
    rec = 0  # start of the current record in buf
    find_from = 0
    eof = False
    while True:
        i = buf.find(delim, find_from)
        if i < 0:
            if eof:
                if rec < len(buf):
                    yield buf[rec:]
                return
            chunk = fh.read(_CHUNK)
            buf = buf[rec:] + chunk
            find_from = max(0, len(buf) - len(chunk) - n + 1)
            rec = 0
            eof = not chunk
            continue
        if esc is not None and _escaped(buf, i, rec, esc):
            find_from = i + 1
            continue
        stop = i + n
        if strip:
            stop = i
            if delimiter is None and i > rec and buf[i - 1] == 13 and not (
                    esc is not None and _escaped(buf, i - 1, rec, esc)):
                stop = i - 1  # '\r\n'
        yield buf[rec:stop]
        rec = find_from = i + n


class ReadFromText(PTransform):
    """Reads the lines (or `delimiter`-separated records) of the files matching `file_pattern`.

    Each record's bytes are decoded with `coder` (default StrUtf8Coder; a JSON coder reads
    JSON lines). Files are split into byte ranges read in parallel, each part at least
    `min_bundle_size` bytes (whole files when compressed, when skipping header lines, or with a
    custom `delimiter` / `escapechar`). A record the coder cannot decode fails the read with an
    error naming the file and line.
    """

    def __init__(self, file_pattern: str, min_bundle_size: int = 0, compression_type: str = "auto",
                 strip_trailing_newlines: bool = True, coder: Any = None, validate: bool = True,
                 skip_header_lines: int = 0, delimiter: Optional[bytes] = None,
                 escapechar: Optional[bytes] = None, label: Optional[str] = None) -> None:
        super().__init__(label)
        if not isinstance(file_pattern, (str, os.PathLike)):
            raise InvalidArgumentError(f"ReadFromText needs a file pattern str, got {file_pattern!r}")
        self._source = _TextSource(os.fspath(file_pattern), strip_trailing_newlines,
                                   skip_header_lines, compression_type, validate, coder=coder,
                                   min_bundle_size=min_bundle_size, delimiter=delimiter,
                                   escapechar=escapechar)

    def default_label(self) -> str:
        return "ReadFromText"

    def expand(self, pbegin: Any) -> PCollection:
        return pbegin | "Read" >> Read(self._source).with_output_types(self._source.output_type())


class ReadFromTextContinuously(PTransform):
    """Reads the lines of the files matching `file_pattern` and keeps watching it: new files
    and lines appended to known ones are read as they appear (an unbounded PCollection).

    With `timestamp_fn` (line -> event time) each line gets its own time and the watermark is
    the largest event time read minus `watermark_delay` seconds; without it, lines are stamped
    with the processing time they were found at. The input ends after `stop_timestamp`
    (processing time) or once nothing new appeared for `stop_after_idle` seconds; the pattern
    is listed at most every `poll_interval` seconds and one read takes new lines from at most
    `max_files_per_read` files. See `headrace.io.watch`.
    """

    def __init__(self, file_pattern: str, poll_interval: float = 1.0,
                 timestamp_fn: Optional[Any] = None, watermark_delay: float = 0.0,
                 stop_timestamp: Any = None, stop_after_idle: Optional[float] = None,
                 max_files_per_read: Optional[int] = None, label: Optional[str] = None) -> None:
        super().__init__(label)
        self._source = GrowingFilesSource(
            file_pattern, _line, "ReadFromTextContinuously", poll_interval, timestamp_fn,
            watermark_delay, stop_timestamp, stop_after_idle, max_files_per_read)

    def default_label(self) -> str:
        return "ReadFromTextContinuously"

    def expand(self, pbegin: Any) -> PCollection:
        return pbegin | "Read" >> Read(self._source).with_output_types(str)


def _line(text: str, path: str, line_no: int) -> str:
    return text


# ---------------------------------------------------------------------------------------


class _TextWriter(FileFormatWriter):
    """Each record as the bytes of the sink's coder plus a newline; header and footer as text."""

    def __init__(self, fh: BinaryIO, sink: "_TextSink") -> None:
        super().__init__(fh)
        self.footer = sink.footer
        self.end = b"\n" if sink.newline else b""
        self.encode = sink.coder.encode
        self.step = sink.step
        if sink.header is not None:
            self.fh.write(_HEADER_CODER.encode(sink.header) + self.end)

    def write(self, record: Any) -> None:
        try:
            data = self.encode(record)
        except Exception as exc:
            raise DataFormatError(
                f"step {self.step!r}: its coder could not encode {_short_repr(record)} "
                f"({type(exc).__name__}: {exc}); convert the element first or pass a coder that "
                "accepts it") from exc
        if not isinstance(data, bytes):
            raise DataFormatError(
                f"step {self.step!r}: its coder's encode() returned {type(data).__name__}, not bytes, "
                f"for {_short_repr(record)}; encode() must return bytes, e.g. "
                "json.dumps(value).encode('utf-8')")
        self.fh.write(data + self.end)

    def finish(self) -> None:
        if self.footer is not None:
            self.fh.write(_HEADER_CODER.encode(self.footer) + self.end)


_HEADER_CODER = ToBytesCoder()  # header and footer are text, whatever the records' coder (as in Beam)


class _TextSink(FileBasedSink):
    def __init__(self, header: Optional[str], footer: Optional[str], newline: bool, coder: Any,
                 *args: Any, **kwargs: Any) -> None:
        super().__init__("WriteToText", *args, **kwargs)
        self.header, self.footer, self.newline, self.coder = header, footer, newline, coder

    def new_writer(self, fh: BinaryIO) -> _TextWriter:
        return _TextWriter(fh, self)


class WriteToText(PTransform):
    """Writes elements as lines to sharded files `prefix-SSSSS-of-NNNNN suffix`, exactly once.

    Each line is `coder.encode(element)` (default ToBytesCoder: bytes as they are, anything
    else as `str(element)` in UTF-8), then a newline when `append_trailing_newlines`; `header`
    and `footer` are written as text. Every bundle (or shard, with `num_shards`) writes a
    temporary file, rolled over to a new one after `max_records_per_shard` records or
    `max_bytes_per_shard` uncompressed bytes; one finalize step renames the committed ones
    atomically, so a retried bundle never leaves duplicates or partial files, and removes an
    earlier run's shards that the new ones did not replace (see `filebasedsink`). With
    `skip_if_empty` an empty input writes no file. `triggering_frequency` (Beam's period of
    windowed streaming writes) has no effect on bounded input, as in Beam, and is refused for
    unbounded input. The output PCollection holds the final file names.
    """

    def __init__(self, file_path_prefix: str, file_name_suffix: str = "",
                 append_trailing_newlines: bool = True, num_shards: int = 0,
                 shard_name_template: Optional[str] = None, coder: Any = None,
                 compression_type: str = "auto", header: Optional[str] = None,
                 footer: Optional[str] = None, *, max_records_per_shard: Optional[int] = None,
                 max_bytes_per_shard: Optional[int] = None, skip_if_empty: bool = False,
                 triggering_frequency: Any = None) -> None:
        super().__init__()
        coder = check_coder("WriteToText", coder, "encode", ToBytesCoder())
        self._sink = _TextSink(header, footer, append_trailing_newlines, coder, file_path_prefix,
                               file_name_suffix, num_shards, shard_name_template, compression_type,
                               max_records_per_shard=max_records_per_shard,
                               max_bytes_per_shard=max_bytes_per_shard, skip_if_empty=skip_if_empty)
        self.num_shards = self._sink.num_shards
        self.triggering_frequency = triggering_frequency

    def default_label(self) -> str:
        return "WriteToText"

    def expand(self, pcoll: Any) -> PCollection:
        if self.triggering_frequency is not None and not getattr(pcoll, "is_bounded", True):
            raise InvalidArgumentError(
                f"WriteToText {self.pipeline.current_transform().full_label!r}: "
                f"triggering_frequency={self.triggering_frequency!r} asks for periodic windowed "
                "writes of an unbounded PCollection, which headrace does not do (it writes "
                "unbounded input once, when it ends); remove triggering_frequency")
        return write_files(pcoll, self._sink)
