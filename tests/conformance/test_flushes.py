"""`WriteInFlushes`: a sink's writes in numbered flushes per shard, each exactly once under
bundle retries and replays, on every runner. The writer here writes files: a flush's marker is
a file created with O_EXCL beside the flush's elements, so a flush written twice would show."""

from __future__ import annotations

import json
import os

import pytest

import headrace as beam
from headrace.errors import InvalidArgumentError
from headrace.io.flushes import FlushWriter, WriteInFlushes, shard_of


class _FileFlushes(FlushWriter):
    """Writes flush n of shard s as <dir>/<s>-<n>.json, once; `fail_after_write` fails the
    first attempt of each flush after it has written (a crash between commit and state)."""

    def __init__(self, directory, once=None):
        self.directory = str(directory)
        self.once = once

    def write(self, shard, flush, elements):
        path = os.path.join(self.directory, f"{shard}-{flush}.json")
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as fh:
            json.dump(sorted(elements), fh)
        if self.once is not None and self.once.first(f"fail-{shard}-{flush}"):
            raise RuntimeError(f"injected: flush {flush} of shard {shard} crashed after its write")
        return True


def _written(directory):
    out = []
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name)) as fh:
            out += [(name, x) for x in json.load(fh)]
    return out


def test_each_element_is_written_once_in_one_flush_per_shard(make_pipeline, tmp_path):
    out = tmp_path / "flushes"
    out.mkdir()
    values = list(range(50)) + [7, 7]   # equal elements are kept, each once
    with make_pipeline(bundle_size=4) as p:
        _ = p | beam.Create(values) | WriteInFlushes(_FileFlushes(out), num_shards=3)
    got = _written(out)
    assert sorted(x for _, x in got) == sorted(values)
    # a bounded input: one flush per shard, numbered 0, each shard's elements in it
    assert sorted({name for name, _ in got}) == sorted({f"{shard_of(v, 3)}-0.json" for v in values})
    assert all(name == f"{shard_of(x, 3)}-0.json" for name, x in got)


def test_a_flush_retried_after_its_write_writes_nothing_more(make_pipeline, tmp_path, once):
    out = tmp_path / "flushes"
    out.mkdir()
    values = [f"v{i}" for i in range(30)]
    with make_pipeline() as p:
        _ = p | beam.Create(values) | WriteInFlushes(_FileFlushes(out, once), num_shards=2)
    assert sorted(x for _, x in _written(out)) == sorted(values)


def test_a_replayed_run_finds_its_markers(make_pipeline, tmp_path):
    """State restored to before a flush gives it the same number and elements again: simulated
    by a second run over the same markers (its flush numbers restart at 0, as a replay's do)."""
    out = tmp_path / "flushes"
    out.mkdir()
    values = list(range(20))
    for _ in range(2):
        with make_pipeline() as p:
            _ = p | beam.Create(values) | WriteInFlushes(_FileFlushes(out), num_shards=2)
    assert sorted(x for _, x in _written(out)) == values


def test_a_writer_must_be_a_flush_writer():
    with pytest.raises(InvalidArgumentError, match="must be a FlushWriter"):
        WriteInFlushes(object())
    with pytest.raises(InvalidArgumentError, match="num_shards"):
        WriteInFlushes(_FileFlushes("/nowhere"), num_shards=0)
