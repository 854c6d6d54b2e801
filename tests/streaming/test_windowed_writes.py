"""File sinks on unbounded input: one file per window, pane and shard, named as Beam's windowed
writes name them, written whole (temporary file, then rename), on every runner.

Expected names and contents are worked out from the windows and triggers below.
"""

from __future__ import annotations

import json

import headrace as beam
from headrace.testing import TestStream
from headrace.transforms import trigger, window
from headrace.io.periodicsequence import PeriodicImpulse
from tests._support import visible_files

TV = beam.TimestampedValue


def test_each_window_of_an_unbounded_input_gets_its_own_files(make_pipeline, tmp_path):
    p = make_pipeline(max_records_per_batch=13)
    (p | PeriodicImpulse(0, 60, 1)
       | beam.Map(lambda ts: str(int(ts)))
       | beam.WindowInto(window.FixedWindows(20))
       | beam.io.WriteToText(str(tmp_path / "out"), file_name_suffix=".txt"))
    p.run().wait_until_finish()
    assert visible_files(tmp_path) == {
        f"out-1970-01-01T00:00:{a:02d}-1970-01-01T00:{(a + 20) // 60:02d}:{(a + 20) % 60:02d}"
        f"-00000-of-00001.txt": sorted(str(i) for i in range(a, a + 20))
        for a in (0, 20, 40)}


def test_panes_of_one_window_get_files_named_by_pane_index_and_shards_split_a_pane(
        make_pipeline, tmp_path):
    # window [0, 10): an on-time pane with a, b; then a late element c, a late pane (discarding)
    stream = (TestStream()
              .add_elements([TV("a", 1), TV("b", 2)])
              .advance_watermark_to(15)
              .add_elements([TV("c", 3)])
              .advance_watermark_to_infinity())
    p = make_pipeline()
    (p | stream
       | beam.WindowInto(window.FixedWindows(10), allowed_lateness=100,
                         accumulation_mode=trigger.AccumulationMode.DISCARDING)
       | beam.Map(json.dumps)
       | beam.io.WriteToText(str(tmp_path / "res"), num_shards=2))
    p.run().wait_until_finish()
    files = visible_files(tmp_path)
    prefix = "res-1970-01-01T00:00:00-1970-01-01T00:00:10-"
    assert all(name.startswith(prefix) for name in files), files
    by_pane = {}
    for name, lines in files.items():
        pane, shard = name[len(prefix):].split("-", 1)
        assert shard in ("00000-of-00002", "00001-of-00002")
        by_pane.setdefault(pane, []).extend(lines)
    assert {k: sorted(v) for k, v in by_pane.items()} == {
        "0": ['"a"', '"b"'], "1": ['"c"']}
