"""Files that keep appearing and growing: `ReadFromTextContinuously` / `ReadFromJsonContinuously`.

The source's position is each file's byte offset after its last complete line, so a read
between two positions is exact and repeatable; its watermark is the largest event time read
minus the delay. The pipelines here run on every runner (on Spark as a Structured Streaming
query), with files written while they run; expected values are computed from what was written.
"""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

import headrace as beam
from headrace.errors import DataFormatError, InvalidArgumentError
from headrace.io.jsonio import ReadFromJsonContinuously
from headrace.io.textio import ReadFromTextContinuously
from headrace.model.time import MAX_TIMESTAMP_MICROS
from headrace.testing.util import assert_that, equal_to
from headrace.transforms import window
from tests._support import counter_value

S = 1_000_000


def _source(pattern, **kw):
    return ReadFromTextContinuously(pattern, **kw)._source


def _lines(src, a, b):
    return [(tv.value, tv.timestamp.micros) for tv in src.read(a, b)]


# ---- the source by itself --------------------------------------------------------------


def test_a_half_written_line_waits_for_its_newline(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("one\ntw")
    src = _source(str(tmp_path / "*.txt"), poll_interval=0)
    p0 = src.initial_position()
    p1 = src.available(p0, 10 * S, 100)
    assert [v for v, _ in _lines(src, p0, p1)] == ["one"]
    with open(path, "a") as fh:
        fh.write("o\nthree\n")
    p2 = src.available(p1, 11 * S, 100)
    assert [v for v, _ in _lines(src, p1, p2)] == ["two", "three"]
    assert src.available(p2, 12 * S, 100) == p2  # nothing new: the same position


def test_reads_between_positions_are_repeatable_and_cut_by_the_limits(tmp_path):
    for f in range(3):
        (tmp_path / f"f{f}.txt").write_text("".join(f"{f}-{i}\n" for i in range(5)))
    src = _source(str(tmp_path / "f*.txt"), poll_interval=0, max_files_per_read=1)
    positions = [src.initial_position()]
    for step in range(10):
        nxt = src.available(positions[-1], (20 + step) * S, 3)
        if nxt == positions[-1]:
            break
        positions.append(nxt)
    got = []
    for a, b in zip(positions, positions[1:]):
        first = _lines(src, a, b)
        assert _lines(src, a, b) == first                      # the same records again
        assert len(first) <= 3 and len({v[0] for v, _ in first}) == 1  # <= 3 lines, 1 file
        got.extend(v for v, _ in first)
    assert got == [f"{f}-{i}" for f in range(3) for i in range(5)]
    # without timestamp_fn, lines are stamped with the time they were found at
    assert {t for _, t in _lines(src, positions[0], positions[1])} == {20 * S}
    assert src.watermark(positions[1]).micros == 20 * S


def test_the_watermark_follows_event_times_and_the_source_ends_when_idle(tmp_path):
    (tmp_path / "e.txt").write_text("100\n50\n130\n")
    src = _source(str(tmp_path / "e.txt"), poll_interval=0, timestamp_fn=int,
                  watermark_delay=10, stop_after_idle=5)
    p0 = src.initial_position()
    p1 = src.available(p0, 1 * S, 100)
    assert _lines(src, p0, p1) == [("100", 100 * S), ("50", 50 * S), ("130", 130 * S)]
    assert src.watermark(p1).micros == 120 * S
    assert src.available(p1, 5 * S, 100) == p1              # idle 4 s: not ended yet
    p2 = src.available(p1, 6 * S, 100)                      # idle 5 s: ended
    assert src.watermark(p2).micros == MAX_TIMESTAMP_MICROS
    assert _lines(src, p1, p2) == []


def test_a_file_that_shrinks_is_an_error_naming_it(tmp_path):
    path = tmp_path / "s.txt"
    path.write_text("a\nb\n")
    src = _source(str(path), poll_interval=0)
    p1 = src.available(src.initial_position(), S, 10)
    path.write_text("a\n")
    with pytest.raises(DataFormatError, match="s.txt shrank"):
        src.available(p1, 2 * S, 10)


@pytest.mark.parametrize("kwargs, fragment", [
    ({"poll_interval": -1}, "poll_interval=-1"),
    ({"max_files_per_read": 0}, "max_files_per_read=0"),
    ({"timestamp_fn": 3}, "timestamp_fn=3 is not callable"),
])
def test_bad_arguments_are_refused(kwargs, fragment):
    with pytest.raises(InvalidArgumentError, match=fragment):
        ReadFromTextContinuously("/tmp/x*", **kwargs)


# ---- pipelines, files written while they run -----------------------------------------------


def _writer(directory, files, interval):
    """Writes `files` (name -> lines) one by one, each whole under a temporary name first."""
    def run():
        for name, lines in files:
            time.sleep(interval)
            tmp = os.path.join(directory, "." + name)
            with open(tmp, "w") as fh:
                fh.write("".join(line + "\n" for line in lines))
            os.replace(tmp, os.path.join(directory, name))
    return threading.Thread(target=run, daemon=True)


def _events(n_files, per_file):
    """(key, value, seconds) events in time order, file after file; in files 1 to n - 4, every
    7th event comes 3 files late (behind the watermark by then, past the lateness)."""
    files, late = [[] for _ in range(n_files)], []
    for f in range(n_files):
        for i in range(per_file):
            t = f * 100 + i * (100 // per_file)
            ev = (f"k{(f + i) % 3}", f * 10 + i, t)
            if 1 <= f and f + 3 < n_files and i % 7 == 3:
                files[f + 3].append(ev)
                late.append(ev)
            else:
                files[f].append(ev)
    return files, late


def test_windowed_sums_of_a_growing_directory_drop_exactly_the_too_late_lines(make_pipeline,
                                                                              tmp_path):
    files, late = _events(n_files=5, per_file=8)
    assert late
    lines = [[json.dumps({"k": k, "v": v, "t": t}) for k, v, t in evs] for evs in files]
    (tmp_path / "f-00.jsonl").write_text("".join(line + "\n" for line in lines[0]))
    writer = _writer(str(tmp_path), [(f"f-{i:02d}.jsonl", ls) for i, ls in enumerate(lines)
                                      if i > 0], 0.2)
    p = make_pipeline(max_records_per_batch=5, bundle_size=3, trigger_interval=0.1)
    sums = (p
            | ReadFromJsonContinuously(str(tmp_path / "f-*.jsonl"), poll_interval=0.05,
                                       timestamp_fn=lambda d: d["t"], stop_after_idle=3,
                                       max_files_per_read=1)
            | beam.Map(lambda d: beam.window.TimestampedValue((d["k"], d["v"]), d["t"]))
            | beam.WindowInto(window.FixedWindows(100))
            | beam.CombinePerKey(sum)
            | beam.Map(lambda kv, w=beam.DoFn.WindowParam: (kv[0], int(w.start), kv[1])))
    expected = {}
    for k, v, t in (ev for evs in files for ev in evs):
        if (k, v, t) not in late:
            expected[(k, t // 100 * 100)] = expected.get((k, t // 100 * 100), 0) + v
    assert_that(sums, equal_to([(k, s, v) for (k, s), v in expected.items()]))
    writer.start()
    result = p.run()
    result.wait_until_finish()
    writer.join()
    assert counter_value(result, "dropped_late_elements") == len(late)


def test_text_lines_without_timestamps_are_stamped_when_found(make_pipeline, tmp_path):
    writer = _writer(str(tmp_path), [(f"w-{i}.txt", [f"w{i}-{j}" for j in range(4)])
                                     for i in range(3)], 0.2)
    p = make_pipeline(trigger_interval=0.1)
    lines = p | ReadFromTextContinuously(str(tmp_path / "w-*.txt"), poll_interval=0.05,
                                         stop_after_idle=3)
    found = lines | beam.Map(lambda line, t=beam.DoFn.TimestampParam: (line, t.micros > 0))
    assert_that(found, equal_to([(f"w{i}-{j}", True) for i in range(3) for j in range(4)]))
    writer.start()
    p.run().wait_until_finish()
    writer.join()
