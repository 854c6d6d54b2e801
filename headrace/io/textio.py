"""Text files: `ReadFromText` and `ReadFromTextWithFilename` (parallel byte-range splits),
`ReadAllFromText` (the files of a PCollection of patterns, a splittable DoFn), `ReadFromTextContinuously` (a
growing set of files) and `WriteToText` (temp files, atomic rename).

Both take Beam's `coder` (see `headrace.coders`): the readers decode each record's bytes with
it (default `StrUtf8Coder`), WriteToText writes the bytes it encodes (default `ToBytesCoder`:
bytes as they are, anything else as `str(value)` in UTF-8). A JSON coder thus reads and
writes JSON lines. Paths may be `file://` URLs; other URL schemes are refused.
"""

from __future__ import annotations

import itertools
import os
from typing import Any, BinaryIO, Iterable, Iterator, List, Optional, Tuple

from headrace.errors import DataFormatError, InvalidArgumentError, _short_repr
from headrace.io.filebasedsink import FileBasedSink, FileFormatWriter, write_files
from headrace.io.filesystem import (
    check_compression_type, check_files_exist, compression_of, match_files, open_for_read,
)
from headrace.io.iobase import BoundedSource, Read
from headrace.io.localfilesystem import local_pattern
from headrace.io.watch import GrowingFilesSource
from headrace.model.coders import StrUtf8Coder, ToBytesCoder
from headrace.pipeline.ptransform import PTransform
from headrace.pipeline.pvalue import PCollection
from headrace.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
from headrace.pipeline.splittable import RecordBlock, RestrictionProvider
from headrace.transforms.core import DoFn, FlatMap, ParDo

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


def _check_delimiter(transform: str, delimiter: Any, escapechar: Any) -> None:
    if delimiter is not None:
        if not isinstance(delimiter, bytes) or not delimiter:
            raise InvalidArgumentError(
                f"{transform}(delimiter=...) must be non-empty bytes such as b'|', got {delimiter!r}")
        if any(delimiter[:i] == delimiter[-i:] for i in range(1, len(delimiter))):
            raise InvalidArgumentError(
                f"{transform}(delimiter={delimiter!r}) overlaps itself (a prefix of it is also its "
                "suffix), so where a record ends would be ambiguous; choose another delimiter")
    if escapechar is not None and not (isinstance(escapechar, bytes) and len(escapechar) == 1):
        raise InvalidArgumentError(
            f"{transform}(escapechar=...) must be a single byte such as b'\\\\', got {escapechar!r}")
    if escapechar is not None and delimiter is not None and escapechar in delimiter:
        raise InvalidArgumentError(
            f"{transform}(delimiter={delimiter!r}, escapechar={escapechar!r}): the escape byte "
            "is part of the delimiter, so escapes and delimiters would be ambiguous; choose an "
            "escape byte the delimiter does not contain")


class _TextSource(BoundedSource):
    """Records of the files matching a glob, split into byte ranges (whole files if compressed).

    Records end at '\\n' (also ending '\\r\\n') or at a custom `delimiter`; with an
    `escapechar`, a delimiter preceded by an odd number of escape bytes is part of the record
    (escape bytes are kept), as in Beam. A record belongs to the range it starts in, and where
    records start can be told from the bytes just before a position, so every file is split,
    whatever the delimiter, escapes and header lines (`skip_header_lines` skips the first
    records of each file). `with_filename` makes each record `(file name, record)`.
    """

    transform = "ReadFromText"

    def __init__(self, pattern: str, strip_trailing_newlines: bool = True, skip_header_lines: int = 0,
                 compression_type: str = "auto", validate: bool = True, coder: Any = None,
                 min_bundle_size: int = 0, delimiter: Optional[bytes] = None,
                 escapechar: Optional[bytes] = None, with_filename: bool = False,
                 transform: Optional[str] = None) -> None:
        if transform is not None:
            self.transform = transform  # the name in errors
        if (isinstance(skip_header_lines, bool) or not isinstance(skip_header_lines, int)
                or skip_header_lines < 0):
            raise InvalidArgumentError(
                f"{self.transform}: skip_header_lines must be a non-negative int, got "
                f"{skip_header_lines!r}")
        if not isinstance(min_bundle_size, int) or min_bundle_size < 0:
            raise InvalidArgumentError(
                f"{self.transform}: min_bundle_size must be a non-negative int, got {min_bundle_size!r}")
        _check_delimiter(self.transform, delimiter, escapechar)
        self.pattern = pattern
        self.strip = bool(strip_trailing_newlines)
        self.skip = skip_header_lines
        self.compression_type = check_compression_type(compression_type)
        self.coder = check_coder(self.transform, coder, "decode", StrUtf8Coder())
        self.min_bundle_size = min_bundle_size
        self.delimiter = delimiter
        self.escapechar = escapechar
        self.with_filename = bool(with_filename)
        if validate:
            check_files_exist(self.transform, pattern, "data/*.txt")

    def _files(self) -> List[str]:
        return match_files(self.pattern)

    def display_name(self) -> str:
        return f"text {self.pattern}"

    def output_type(self) -> Any:
        """The type of the values read (None when the coder does not say)."""
        hint = getattr(self.coder, "to_type_hint", None)
        value = hint() if callable(hint) else None
        if self.with_filename:
            return Tuple[str, value] if value is not None else None
        return value

    def split(self, desired_parallelism: int) -> List[Tuple[str, int, int]]:
        files = self._files()
        if not files:
            raise FileNotFoundError(f"no files match {self.pattern!r}")
        total = sum(os.path.getsize(f) for f in files)
        target = max(_MIN_SPLIT_BYTES, self.min_bundle_size,
                     min(_SPLIT_BYTES, total // max(1, desired_parallelism) + 1))
        return [r for f in files for r in self.ranges(f, target)]

    def ranges(self, path: str, target: int) -> List[Tuple[str, int, int]]:
        """The parts of one file: byte ranges of about `target` bytes, or the whole file
        (`end` -1) when it is compressed or small."""
        size = os.path.getsize(path)
        if compression_of(path, self.compression_type) or size <= target:
            return [(path, 0, -1)]
        return [(path, start, min(size, start + target)) for start in range(0, size, target)]

    def part_size(self, part: Tuple[str, int, int]) -> float:
        """A part's bytes (a whole file's, compressed or not, when it is read whole)."""
        path, start, end = part
        return float(os.path.getsize(path) if end < 0 else end - start)

    def read(self, part: Tuple[str, int, int]) -> Iterable[Any]:
        for block in self._blocks(part):
            yield from block

    def read_batches(self, part: Tuple[str, int, int], size: int) -> Iterable[List[Any]]:
        """The records of one part in lists of about `size` (whole buffers of the file: lines are
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

    def _plain(self) -> bool:
        return self.delimiter is None and self.escapechar is None

    def _open(self, path: str) -> Any:
        return open_for_read(path, compression_of(path, self.compression_type))

    def _blocks(self, part: Tuple[str, int, int]) -> Iterator[List[Any]]:
        """The decoded records of a part, a list per buffer read."""
        if not self.with_filename:
            yield from self._value_blocks(part)
            return
        path = part[0]
        for block in self._value_blocks(part):
            yield [(path, x) for x in block]

    def _value_blocks(self, part: Tuple[str, int, int]) -> Iterator[List[Any]]:
        coder = self.coder
        fast = type(coder) is StrUtf8Coder
        decode = coder.decode
        if not self._plain():
            block: List[Any] = []
            for k, (_, raw) in enumerate(self._records(part)):
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
            out = self.decode_lines(data, part, k)
            yield out
            k += len(out)

    def decode_lines(self, data: bytes, part: Tuple[str, int, int], k: int) -> List[Any]:
        """The decoded lines of a buffer of whole lines (`_line_buffers`), the `k`-th of the part
        first (for the line number of an undecodable one)."""
        coder = self.coder
        fast = type(coder) is StrUtf8Coder
        if fast:
            try:
                lines: List[Any] = data.decode("utf-8").split("\n")
            except UnicodeDecodeError:
                pass  # find and report the undecodable line below
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
                return lines
        decode = coder.decode
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
        return out

    def _header_end(self, fh: Any) -> int:
        """The offset of the first record after the skipped header records (`fh` at offset 0)."""
        if not self.skip:
            return 0
        pos = 0
        if self._plain():
            for _ in range(self.skip):
                line = fh.readline()
                if not line:
                    break
                pos += len(line)
            return pos
        for n, (_, pos, _) in enumerate(_scan(fh, 0, self.delimiter, self.escapechar, self.strip)):
            if n + 1 == self.skip:
                break
        return pos

    def _first_line(self, fh: Any, start: int) -> int:
        """Moves `fh` (at offset 0) to the first line starting at or after `start` and after the
        header, and returns that line's offset ('\\n'-ended lines only)."""
        header = self._header_end(fh)
        if start <= header:
            if fh.tell() != header:
                fh.seek(header)
            return header
        fh.seek(start - 1)
        skipped = fh.readline()  # finish the line that straddles the split start
        return start - 1 + len(skipped)

    def _line_buffers(self, part: Tuple[str, int, int]) -> Iterator[bytes]:
        """The part's lines as buffers of whole lines, each ending in b'\\n' but perhaps the
        file's last line; header lines skipped."""
        for _, data in self.offset_buffers(part):
            yield data

    def offset_buffers(self, part: Tuple[str, int, int]) -> Iterator[Tuple[int, bytes]]:
        """(file offset, buffer) of `_line_buffers`: the buffers of the lines starting in the
        part (plain '\\n'-ended lines only)."""
        path, start, end = part
        with self._open(path) as fh:
            base = self._first_line(fh, start)  # the file offset of `rest` (then `data`)
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
                if data:
                    yield base, data
                base += cut
                if last:
                    return

    def _records(self, part: Tuple[str, int, int]) -> Iterator[Tuple[int, bytes]]:
        """(offset, raw record) of each record starting in the part, found by scanning for the
        delimiter and escapes (without the delimiter when stripping)."""
        path, start, end = part
        with self._open(path) as fh:
            header = self._header_end(fh)
            if start <= header:
                base = header
            else:
                # a record starting at `start` or later follows a delimiter ending at or after
                # `start`; scan from where such a delimiter could begin, and from the start of
                # the escape bytes just before it (they decide whether it is escaped)
                base = max(header, start - len(self.delimiter or b"\n"))
                if self.escapechar is not None:
                    base = _escape_run_start(fh, base, header, self.escapechar)
            if fh.tell() != base:
                fh.seek(base)
            for offset, _, raw in _scan(fh, base, self.delimiter, self.escapechar, self.strip):
                if offset < start:
                    continue
                if end >= 0 and offset >= end:
                    return
                yield offset, raw

    def line_number(self, part: Tuple[str, int, int], k: int) -> int:
        """The 1-based line (record) number in its file of the part's `k`-th record."""
        path, start, _ = part
        with self._open(path) as fh:
            if self._plain():
                first = self._first_line(fh, start)
                fh.seek(0)
                return _count_newlines(fh, first) + k + 1
            offset = next((o for o, _ in self._records(part)), None)
            if offset is None:
                return k + 1
            fh.seek(0)
            records = _scan(fh, 0, self.delimiter, self.escapechar, self.strip)
            before = sum(1 for _ in itertools.takewhile(lambda r: r[1] <= offset, records))
            return before + k + 1

    def _undecodable(self, part: Tuple[str, int, int], k: int, raw: bytes, exc: Exception
                     ) -> DataFormatError:
        what = "line" if self.delimiter is None else "record"
        return DataFormatError(
            f"{self.transform}: {part[0]} {what} {self.line_number(part, k)} could not be decoded by "
            f"its coder {self.coder!r} ({type(exc).__name__}: {exc}): {_short_repr(raw, 120)}. Fix "
            f"or remove that {what}, or read with a coder that accepts it (coder=...)")


def _count_newlines(fh: Any, end: int) -> int:
    """The number of b'\\n' in the next `end` bytes of `fh`."""
    count = 0
    while end > 0:
        chunk = fh.read(min(end, _CHUNK))
        if not chunk:
            break
        count += chunk.count(b"\n")
        end -= len(chunk)
    return count


def _escape_run_start(fh: Any, pos: int, floor: int, escapechar: bytes) -> int:
    """The offset where the run of escape bytes that ends just before `pos` starts (`pos` if
    the byte before it is no escape), looking back no further than `floor`."""
    while pos > floor:
        step = min(pos - floor, 4096)
        fh.seek(pos - step)
        data = fh.read(step)
        stripped = data.rstrip(escapechar)
        pos -= len(data) - len(stripped)
        if stripped:
            break
    return pos


def _escaped(buf: bytes, i: int, start: int, esc: int) -> bool:
    """Whether the byte at `i` follows an odd number of escape bytes (looking back to `start`)."""
    n = 0
    while i - 1 - n >= start and buf[i - 1 - n] == esc:
        n += 1
    return n % 2 == 1


def _scan(fh: BinaryIO, base: int, delimiter: Optional[bytes], escapechar: Optional[bytes],
          strip: bool) -> Iterator[Tuple[int, int, bytes]]:
    """The records of `fh` (read from its current position, file offset `base`) split at
    `delimiter` (default: '\\n', also ending '\\r\\n') where it is not escaped: (offset of the
    record, offset of the next one, bytes of the record)."""
    delim = delimiter if delimiter is not None else b"\n"
    esc = escapechar[0] if escapechar is not None else None
    n = len(delim)
    buf = b""
    off = base  # the file offset of buf[0]
    rec = 0  # start of the current record in buf
    find_from = 0
    eof = False
    while True:
        i = buf.find(delim, find_from)
        if i < 0:
            if eof:
                if rec < len(buf):
                    yield off + rec, off + len(buf), buf[rec:]
                return
            chunk = fh.read(_CHUNK)
            off += rec
            find_from = max(0, find_from - rec, len(buf) - rec - n + 1)
            buf = buf[rec:] + chunk
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
        yield off + rec, off + i + n, buf[rec:stop]
        rec = find_from = i + n


class ReadFromText(PTransform):
    """Reads the lines (or `delimiter`-separated records) of the files matching `file_pattern`.

    Each record's bytes are decoded with `coder` (default StrUtf8Coder; a JSON coder reads
    JSON lines). Files are split into byte ranges read in parallel, each part at least
    `min_bundle_size` bytes (whole files when compressed), also with a custom `delimiter`, an
    `escapechar` or `skip_header_lines`. `compression_type` is one of CompressionTypes (AUTO:
    by suffix). A record the coder cannot decode fails the read with an error naming the file
    and line.
    """

    _with_filename = False

    def __init__(self, file_pattern: str, min_bundle_size: int = 0, compression_type: str = "auto",
                 strip_trailing_newlines: bool = True, coder: Any = None, validate: bool = True,
                 skip_header_lines: int = 0, delimiter: Optional[bytes] = None,
                 escapechar: Optional[bytes] = None, label: Optional[str] = None) -> None:
        super().__init__(label)
        name = self.default_label()
        if not isinstance(file_pattern, (str, os.PathLike)):
            raise InvalidArgumentError(f"{name} needs a file pattern str, got {file_pattern!r}")
        self._source = _TextSource(
            local_pattern(name, os.fspath(file_pattern)), strip_trailing_newlines,
            skip_header_lines, compression_type, validate, coder=coder,
            min_bundle_size=min_bundle_size, delimiter=delimiter, escapechar=escapechar,
            with_filename=self._with_filename, transform=name)

    def default_label(self) -> str:
        return "ReadFromText"

    def expand(self, pbegin: Any) -> PCollection:
        return pbegin | "Read" >> Read(self._source).with_output_types(self._source.output_type())


class ReadFromTextWithFilename(ReadFromText):
    """ReadFromText whose elements are `(file name, record)` pairs (Beam's name and arguments)."""

    _with_filename = True

    def default_label(self) -> str:
        return "ReadFromTextWithFilename"


_DESIRED_BUNDLE_SIZE = 64 * 1024 * 1024


class _ExpandIntoFiles:
    """pattern (or FileMetadata) -> the files it matches."""

    def __init__(self, transform: str) -> None:
        self.transform = transform

    def __call__(self, pattern: Any) -> List[str]:
        transform = self.transform
        path = getattr(pattern, "path", pattern)  # a FileMetadata reads its file
        if not isinstance(path, (str, os.PathLike)):
            raise InvalidArgumentError(
                f"{transform} reads file patterns (str) or FileMetadata, got "
                f"{type(pattern).__name__} {_short_repr(pattern, 80)}")
        path = local_pattern(transform, os.fspath(path))
        files = match_files(path)
        if not files and not any(c in path for c in "*?["):
            raise FileNotFoundError(
                f"{transform}: no file {path!r}; check the path (patterns with * ? [...] that "
                "match nothing read nothing)")
        return files


class _ReadTextRanges(DoFn, RestrictionProvider):
    """The splittable read of `ReadAllFromText`: a file (the element) and a byte range of it
    (the restriction), whose positions are the starts of its records; each record belongs to
    the range it starts in (as in `_TextSource`). Initial ranges are parts of about `target`
    bytes; a range's size is its bytes. Plain lines are claimed a buffer at a time (about
    1 MB, `_TextSource.offset_buffers`): the claim is the buffer's last line start, which
    covers every line of the buffer, and a buffer is first cut at the restriction's stop (a
    split may have moved it). Records with a delimiter or escapes are claimed one by one. A
    compressed file is the one position 0, read whole, sized by its compressed bytes."""

    def __init__(self, source: _TextSource, target: int) -> None:
        self.source = source
        self.target = target

    def _compressed(self, path: str) -> bool:
        return bool(compression_of(path, self.source.compression_type))

    def initial_restriction(self, path: str) -> OffsetRange:
        return OffsetRange(0, 1 if self._compressed(path) else os.path.getsize(path))

    def create_tracker(self, restriction: OffsetRange) -> OffsetRestrictionTracker:
        return OffsetRestrictionTracker(restriction)

    def split(self, path: str, restriction: OffsetRange) -> Iterable[OffsetRange]:
        if self._compressed(path) or restriction.size() <= self.target:
            return [restriction]
        return list(restriction.split(self.target))

    def restriction_size(self, path: str, restriction: OffsetRange) -> float:
        if self._compressed(path):
            return float(os.path.getsize(path))
        return float(restriction.size())

    def process(self, path: str, tracker: Any = DoFn.RestrictionParam()) -> Iterator[Any]:
        src = self.source
        if self._compressed(path):
            if tracker.try_claim(0):
                for block in src._value_blocks((path, 0, -1)):
                    yield self._block(path, block)
            return
        r = tracker.current_restriction()
        part = (path, r.start, r.stop)
        if src._plain():
            for lines in self._plain_records(path, part, tracker):
                yield self._block(path, lines)
            return
        for x in self._delimited_records(part, tracker):
            yield (path, x) if src.with_filename else x

    def _block(self, path: str, records: List[Any]) -> RecordBlock:
        """Records of one claim as one output (`RecordBlock`: the runner takes them as a column)."""
        return RecordBlock([(path, x) for x in records] if self.source.with_filename else records)

    def _plain_records(self, path: str, part: Tuple[str, int, int], tracker: Any) -> Iterator[List[Any]]:
        """The lines of each claimed buffer (a list per claim)."""
        src = self.source
        k = 0
        for base, data in src.offset_buffers(part):
            stop = tracker.current_restriction().stop
            if base >= stop:
                break
            if base + len(data) > stop:  # lines starting at or after the stop are not ours
                nl = data.find(b"\n", stop - 1 - base)
                if nl >= 0:
                    data = data[:nl + 1]
            if not tracker.try_claim(base + data.rfind(b"\n", 0, len(data) - 1) + 1):
                return
            lines = src.decode_lines(data, part, k)
            k += len(lines)
            yield lines
        tracker.try_claim(tracker.current_restriction().stop)  # the end: fails, the range is done

    def _delimited_records(self, part: Tuple[str, int, int], tracker: Any) -> Iterator[Any]:
        src = self.source
        fast = type(src.coder) is StrUtf8Coder
        for k, (offset, raw) in enumerate(src._records(part)):
            if not tracker.try_claim(offset):
                return
            try:
                yield raw.decode("utf-8") if fast else src.coder.decode(raw)
            except Exception as exc:
                raise src._undecodable(part, k, raw, exc) from None
        tracker.try_claim(tracker.current_restriction().stop)


class ReadAllFromText(PTransform):
    """Reads the files named by a PCollection of file patterns (or FileMetadata): each pattern's
    files are split into ranges of about `desired_bundle_size` bytes (at least
    `min_bundle_size`; compressed files whole) and read as ReadFromText reads them, by a
    splittable DoFn (so a runner balances the ranges by size and may split them further while
    they are read); with `with_filename` the elements are `(file name, record)`.

    A pattern without wildcards that names no file fails the pipeline (Beam's
    ALLOW_IF_WILDCARD); a wildcard pattern that matches nothing reads nothing. Each record keeps
    the timestamp and window of the pattern it came from. `validate` is accepted, as in Beam,
    and checks nothing: the patterns are known only when the pipeline runs.
    """

    def __init__(self, min_bundle_size: int = 0, desired_bundle_size: int = _DESIRED_BUNDLE_SIZE,
                 compression_type: str = "auto", strip_trailing_newlines: bool = True,
                 validate: bool = False, coder: Any = None, skip_header_lines: int = 0,
                 with_filename: bool = False, delimiter: Optional[bytes] = None,
                 escapechar: Optional[bytes] = None, label: Optional[str] = None) -> None:
        super().__init__(label)
        if (isinstance(desired_bundle_size, bool) or not isinstance(desired_bundle_size, int)
                or desired_bundle_size < 1):
            raise InvalidArgumentError(
                f"ReadAllFromText: desired_bundle_size must be a positive int (bytes), got "
                f"{desired_bundle_size!r}")
        self._source = _TextSource(
            "", strip_trailing_newlines, skip_header_lines, compression_type, False, coder=coder,
            min_bundle_size=min_bundle_size, delimiter=delimiter, escapechar=escapechar,
            with_filename=with_filename, transform="ReadAllFromText")
        self._target = max(desired_bundle_size, min_bundle_size, 1)

    def default_label(self) -> str:
        return "ReadAllFromText"

    def expand(self, pcoll: Any) -> PCollection:
        out: PCollection = (
            pcoll
            | "ExpandIntoFiles" >> FlatMap(_ExpandIntoFiles(self._source.transform))
            | "ReadRanges" >> ParDo(_ReadTextRanges(self._source, self._target)).with_output_types(
                self._source.output_type()))
        return out


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
