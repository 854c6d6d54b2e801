"""Beam's `FileSystems`: file operations by path, dispatched on the path's URL scheme.

headrace has one file system, `LocalFileSystem`: plain paths and `file://` URLs. A path with
any other scheme (`gs://`, `s3://`, `hdfs://`, ...) is refused with an error naming the scheme
and what is supported.
"""

from __future__ import annotations

import re
from typing import Any, BinaryIO, List, Optional, Sequence, Tuple

from headrace.errors import UnsupportedArgumentError
from headrace.io.filesystem import BeamIOError, CompressionTypes, MatchResult
from headrace.io.localfilesystem import LocalFileSystem

__all__ = ["FileSystems"]


class FileSystems:
    """Static file operations (match, open, create, copy, rename, delete, ...) on local paths and
    `file://` URLs, with Beam's signatures and errors (BeamIOError for failed batch operations)."""

    URI_SCHEMA_PATTERN = re.compile(r"(?P<scheme>[a-zA-Z][-a-zA-Z0-9+.]*)://.*")

    _pipeline_options: Any = None

    @classmethod
    def set_options(cls, pipeline_options: Any) -> None:
        """Keeps `pipeline_options` for the file systems (the local one needs none)."""
        cls._pipeline_options = pipeline_options

    @staticmethod
    def get_scheme(path: str) -> Optional[str]:
        """The URL scheme of `path` ('file', 'gs', ...), None for a plain path."""
        m = FileSystems.URI_SCHEMA_PATTERN.match(path.strip())
        return m.group("scheme") if m else None

    @staticmethod
    def get_filesystem(path: str) -> LocalFileSystem:
        """The file system for `path`: LocalFileSystem for a plain path or a `file://` URL."""
        if not isinstance(path, str):
            raise UnsupportedArgumentError(
                f"FileSystems needs a path as a str, got {type(path).__name__} {path!r}")
        scheme = FileSystems.get_scheme(path)
        if scheme is not None and scheme.lower() != "file":
            raise UnsupportedArgumentError(
                f"no file system for the scheme {scheme!r} of {path!r}: headrace reads and writes "
                "local paths and file:// URLs only; use a local or mounted path (for example a "
                "bucket mounted with gcsfuse or s3fs, or a Spark cluster's shared file system)")
        return LocalFileSystem(pipeline_options=FileSystems._pipeline_options)

    @staticmethod
    def join(basepath: str, *paths: str) -> str:
        """`basepath` and `paths` joined into one path."""
        return FileSystems.get_filesystem(basepath).join(basepath, *paths)

    @staticmethod
    def split(path: str) -> Tuple[str, str]:
        """(head, tail) of `path`: tail is its last component, head the (absolute) rest."""
        return FileSystems.get_filesystem(path).split(path)

    @staticmethod
    def mkdirs(path: str) -> None:
        """Creates the directory `path` and its parents; IOError if it already exists."""
        FileSystems.get_filesystem(path).mkdirs(path)

    @staticmethod
    def match(patterns: Sequence[str], limits: Optional[Sequence[Optional[int]]] = None
              ) -> List[MatchResult]:
        """A MatchResult (pattern, FileMetadata list) per pattern; `limits` caps each list."""
        if isinstance(patterns, str):
            raise UnsupportedArgumentError(
                f"FileSystems.match takes a list of patterns, e.g. FileSystems.match([{patterns!r}])")
        if len(patterns) == 0:
            return []
        return _filesystem_of(patterns).match(patterns, limits)

    @staticmethod
    def create(path: str, mime_type: str = "application/octet-stream",
               compression_type: str = CompressionTypes.AUTO) -> BinaryIO:
        """A file opened for writing bytes at `path`, compressed as `compression_type` says."""
        return FileSystems.get_filesystem(path).create(path, mime_type, compression_type)

    @staticmethod
    def open(path: str, mime_type: str = "application/octet-stream",
             compression_type: str = CompressionTypes.AUTO) -> BinaryIO:
        """The file at `path` opened for reading bytes, decompressed as `compression_type` says."""
        return FileSystems.get_filesystem(path).open(path, mime_type, compression_type)

    @staticmethod
    def copy(source_file_names: Sequence[str], destination_file_names: Sequence[str]) -> None:
        """Copies each source file or directory to its destination; BeamIOError on failures."""
        if len(source_file_names) == 0:
            return
        _filesystem_of([*source_file_names, *destination_file_names]).copy(
            source_file_names, destination_file_names)

    @staticmethod
    def rename(source_file_names: Sequence[str], destination_file_names: Sequence[str]) -> None:
        """Renames each source to its destination; BeamIOError on failures."""
        if len(source_file_names) == 0:
            return
        _filesystem_of([*source_file_names, *destination_file_names]).rename(
            source_file_names, destination_file_names)

    @staticmethod
    def exists(path: str) -> bool:
        """Whether a file or directory exists at `path`."""
        return FileSystems.get_filesystem(path).exists(path)

    @staticmethod
    def last_updated(path: str) -> float:
        """The last modification time of `path` in seconds since the epoch."""
        return FileSystems.get_filesystem(path).last_updated(path)

    @staticmethod
    def checksum(path: str) -> str:
        """The file's checksum as the file system keeps it (the local one: its size)."""
        return FileSystems.get_filesystem(path).checksum(path)

    @staticmethod
    def delete(paths: Sequence[str]) -> None:
        """Deletes the files and directories (recursively) at `paths`; BeamIOError on failures."""
        if isinstance(paths, str):
            raise BeamIOError(
                f"Delete passed string argument instead of list: {paths}; pass a list, e.g. "
                f"FileSystems.delete([{paths!r}])")
        if len(paths) == 0:
            return
        _filesystem_of(paths).delete(paths)

    @staticmethod
    def get_chunk_size(path: str) -> int:
        """How many paths a batch operation of the file system handles at once."""
        return FileSystems.get_filesystem(path).CHUNK_SIZE


def _filesystem_of(paths: Sequence[str]) -> LocalFileSystem:
    """The one file system of all `paths` (each is checked, so no path of another scheme slips
    through as a relative local path)."""
    for path in paths[1:]:
        FileSystems.get_filesystem(path)
    return FileSystems.get_filesystem(paths[0])
