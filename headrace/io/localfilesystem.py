"""Beam's `LocalFileSystem`: files on local (or mounted) disks, by plain path or `file://` URL.

Patterns follow Beam's syntax: `*` matches within one path component, `**` across
components, `?` one character, `[...]` a set; a pattern ending in `/` matches everything under
that directory. A path given as `file:///a/b` is the local path `/a/b`, and what `match`
returns keeps the form of its pattern (a `file://` pattern gives `file://` paths), so results
can be passed back to any method.
"""

from __future__ import annotations

import os
import re
import shutil
from typing import Any, BinaryIO, Dict, Iterator, List, Optional, Sequence, Tuple

from headrace.errors import InvalidArgumentError, UnsupportedArgumentError
from headrace.io.filesystem import (
    BeamIOError, CompressionTypes, FileMetadata, MatchResult, check_compression_type,
    compressing_writer, compression_of, open_for_read,
)

__all__ = ["LocalFileSystem"]

_FILE = "file://"


def local_path(path: str) -> str:
    """The local path of `path`: itself, or the path of a `file://` URL (`file://localhost/x` too)."""
    if path[:len(_FILE)].lower() != _FILE:
        return path
    rest = path[len(_FILE):]
    if rest.lower().startswith("localhost/"):
        rest = rest[len("localhost"):]
    return rest


def local_pattern(transform: str, pattern: str) -> str:
    """`pattern` as a local path (a `file://` URL's path); another URL scheme is refused."""
    m = re.match(r"([a-zA-Z][-a-zA-Z0-9+.]*)://", pattern)
    if m is None:
        return pattern
    if m.group(1).lower() != "file":
        raise UnsupportedArgumentError(
            f"{transform}({pattern!r}): no file system for the scheme {m.group(1)!r}; headrace "
            "reads and writes local paths and file:// URLs only; use a local or mounted path (for "
            "example a bucket mounted with gcsfuse or s3fs, or a Spark cluster's shared file "
            "system)")
    return local_path(pattern)


def _with_scheme_of(pattern: str, path: str) -> str:
    return _FILE + path if pattern[:len(_FILE)].lower() == _FILE else path


def translate_pattern(pattern: str) -> str:
    """A regular expression for Beam's file pattern syntax (see the module doc)."""
    out: List[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        i += 1
        if c == "*":
            if i < n and pattern[i] == "*":
                out.append(".*")
                i += 1
            else:
                out.append(r"[^/\\]*")
        elif c == "?":
            out.append(".")
        elif c == "[":
            j = i
            if j < n and pattern[j] == "!":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 1
            if j >= n:
                out.append(r"\[")
            else:
                chars = pattern[i:j].replace("\\", "\\\\")
                i = j + 1
                if chars[0] == "!":
                    chars = "^" + chars[1:]
                elif chars[0] == "^":
                    chars = "\\" + chars
                out.append(f"[{chars}]")
        else:
            out.append(re.escape(c))
    return "(?ms)" + "".join(out) + r"\Z"


class LocalFileSystem:
    """Beam's LocalFileSystem: the file operations of `FileSystems` on local paths."""

    CHUNK_SIZE = 1

    def __init__(self, pipeline_options: Any = None) -> None:
        self.pipeline_options = pipeline_options

    @classmethod
    def scheme(cls) -> Optional[str]:
        """The URL scheme of this file system: None (plain paths; `file://` is accepted too)."""
        return None

    def join(self, basepath: str, *paths: str) -> str:
        """`basepath` and `paths` joined with the local separator."""
        return os.path.join(basepath, *paths)

    def split(self, path: str) -> Tuple[str, str]:
        """(head, tail) of the absolute form of `path`: tail is its last component."""
        head, tail = os.path.split(os.path.abspath(local_path(path)))
        return _with_scheme_of(path, head), tail

    def mkdirs(self, path: str) -> None:
        """Creates the directory `path` and its parents; IOError if it already exists."""
        try:
            os.makedirs(local_path(path))
        except OSError as err:
            raise IOError(err) from err

    def has_dirs(self) -> bool:
        """Whether this file system has directories (it does)."""
        return True

    def exists(self, path: str) -> bool:
        """Whether a file or directory exists at `path`."""
        return os.path.exists(local_path(path))

    def size(self, path: str) -> int:
        """The size of the file at `path` in bytes; BeamIOError if there is none."""
        try:
            return os.path.getsize(local_path(path))
        except OSError as exc:
            raise BeamIOError("Size operation failed", {path: exc}) from exc

    def last_updated(self, path: str) -> float:
        """The last modification time of `path` (seconds since the epoch); BeamIOError if missing."""
        if not self.exists(path):
            raise BeamIOError(f"Path does not exist: {path}")
        return os.path.getmtime(local_path(path))

    def checksum(self, path: str) -> str:
        """Beam's local checksum: the file's size as a str; BeamIOError if missing."""
        if not self.exists(path):
            raise BeamIOError(f"Path does not exist: {path}")
        return str(os.path.getsize(local_path(path)))

    def metadata(self, path: str) -> FileMetadata:
        """The FileMetadata of `path` (size and modification time); BeamIOError if missing."""
        try:
            st = os.stat(local_path(path))
        except OSError as exc:
            raise BeamIOError("Metadata operation failed", {path: exc}) from exc
        return FileMetadata(path, st.st_size, st.st_mtime)

    def _list(self, directory: str, pattern: str) -> Iterator[FileMetadata]:
        root = local_path(directory) or "."
        if not os.path.isdir(root):
            return
        for dirpath, _, files in os.walk(root):
            for name in files:
                f = os.path.join(dirpath, name)
                if not directory and f.startswith("./"):
                    f = f[2:]
                try:
                    st = os.stat(f)
                except OSError:
                    continue  # gone between listing and stat
                yield FileMetadata(_with_scheme_of(pattern, f), st.st_size, st.st_mtime)

    def _match(self, pattern: str, limit: Optional[int]) -> MatchResult:
        if pattern.endswith(("/", "\\")):
            pattern += "*"
        head = re.match(r"^[^[*?]*", pattern)
        prefix = head.group(0) if head else ""
        if prefix == pattern:
            found = [self.metadata(pattern)] if self.exists(pattern) else []
        else:
            regex = re.compile(translate_pattern(local_path(pattern)))
            directory = os.path.dirname(prefix)
            found = sorted((m for m in self._list(directory, pattern)
                            if regex.match(local_path(m.path))), key=lambda m: m.path)
        return MatchResult(pattern, found if limit is None else found[:limit])

    def match(self, patterns: Sequence[str], limits: Optional[Sequence[Optional[int]]] = None
              ) -> List[MatchResult]:
        """A MatchResult per pattern (in order), each with at most its limit of files; a pattern
        that matches nothing gives an empty list. BeamIOError if listing fails."""
        if limits is None:
            limits = [None] * len(patterns)
        elif len(limits) != len(patterns):
            raise InvalidArgumentError(
                f"FileSystems.match: {len(patterns)} patterns but {len(limits)} limits; give one "
                "limit (or None) per pattern, or no limits")
        results: List[MatchResult] = []
        failures: Dict[Any, BaseException] = {}
        for pattern, limit in zip(patterns, limits):
            try:
                results.append(self._match(pattern, limit))
            except Exception as exc:
                failures[pattern] = exc
        if failures:
            raise BeamIOError("Match operation failed", failures)
        return results

    def open(self, path: str, mime_type: str = "application/octet-stream",
             compression_type: str = CompressionTypes.AUTO) -> BinaryIO:
        """The file at `path` opened for reading bytes, decompressed as `compression_type` says
        (AUTO: by its suffix)."""
        local = local_path(path)
        compression = compression_of(local, check_compression_type(compression_type))
        if not os.path.isfile(local):
            what = "a directory" if os.path.isdir(local) else "no file"
            raise FileNotFoundError(
                2, f"FileSystems.open: {path!r} is {what}; check the path (FileSystems.match("
                   f"[pattern]) lists the files a pattern matches)", path)
        fh: BinaryIO = open_for_read(local, compression)
        return fh

    def create(self, path: str, mime_type: str = "application/octet-stream",
               compression_type: str = CompressionTypes.AUTO) -> BinaryIO:
        """A new file at `path` (replacing one there; missing parent directories are created)
        opened for writing bytes, compressed as `compression_type` says (AUTO: by its suffix).
        The file is complete once closed."""
        local = local_path(path)
        compression = compression_of(local, check_compression_type(compression_type))
        parent = os.path.dirname(local)
        if parent:
            os.makedirs(parent, exist_ok=True)
        raw = open(local, "wb")
        fh: BinaryIO = compressing_writer(raw, compression, close_raw=True)
        return fh

    def copy(self, source_file_names: Sequence[str], destination_file_names: Sequence[str]) -> None:
        """Copies each source (a file, or a directory recursively) over its destination."""
        def copy_one(src: str, dst: str) -> None:
            if os.path.isdir(dst):
                shutil.rmtree(dst)
            elif os.path.exists(dst):
                os.remove(dst)
            if os.path.isdir(src):
                shutil.copytree(src, dst)
            else:
                shutil.copy2(src, dst)
        self._pairwise("Copy", source_file_names, destination_file_names, copy_one)

    def rename(self, source_file_names: Sequence[str], destination_file_names: Sequence[str]) -> None:
        """Moves each source to its destination (replacing a file there)."""
        self._pairwise("Rename", source_file_names, destination_file_names, os.replace)

    def _pairwise(self, op: str, sources: Sequence[str], destinations: Sequence[str], fn: Any) -> None:
        if isinstance(sources, str) or isinstance(destinations, str):
            raise InvalidArgumentError(
                f"FileSystems.{op.lower()} takes lists of paths, e.g. "
                f"FileSystems.{op.lower()}([src], [dst]), got {sources!r}, {destinations!r}")
        if len(sources) != len(destinations):
            raise InvalidArgumentError(
                f"FileSystems.{op.lower()}: {len(sources)} sources but {len(destinations)} "
                "destinations; give one destination per source")
        failures: Dict[Any, BaseException] = {}
        for src, dst in zip(sources, destinations):
            try:
                fn(local_path(src), local_path(dst))
            except Exception as exc:
                failures[(src, dst)] = exc
        if failures:
            raise BeamIOError(f"{op} operation failed", failures)

    def delete(self, paths: Sequence[str]) -> None:
        """Deletes the files and directories (recursively) that each path or pattern matches;
        BeamIOError naming those that matched nothing or could not be deleted."""
        failures: Dict[Any, BaseException] = {}
        for path in paths:
            if self.exists(path):
                targets = [path]
            else:
                targets = [m.path for m in self._match(path, None).metadata_list]
                if not targets:
                    failures[path] = FileNotFoundError(
                        2, "No files found to delete (check the path)", path)
            for target in targets:
                local = local_path(target)
                try:
                    if os.path.isdir(local):
                        shutil.rmtree(local)
                    else:
                        os.remove(local)
                except Exception as exc:
                    failures[target] = exc
        if failures:
            raise BeamIOError("Delete operation failed", failures)
