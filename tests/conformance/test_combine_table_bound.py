"""A lifted CombinePerKey whose map-side table is full emits its partial accumulators early.

The Spark batch runner combines each partition's inputs before the shuffle in a table bounded
by `runners.kit.partial.MAX_CELLS` cells and `MAX_BYTES` estimated bytes (a worker's memory
then does not grow with its partition); a full table is emitted and starts again, and the
reduce side merges a key's partials of several emits as those of several workers. Here either
bound is a few cells' worth, so every partition emits many times: the panes, their timestamps
and the element counts must be those of the element-by-element execution (the other runners do
not lift, and give the reference).
"""

from __future__ import annotations

import collections

import pytest

import headrace as beam
from headrace.runners.kit import partial
from headrace.testing.util import assert_that, equal_to
from headrace.transforms import window
from tests.conformance.test_parquet_combine import (assert_benchmark_shape_sums, events, hourly_sums,
                                                    sessions, write_files)

US = 1_000_000
# (user, seconds): visits of a few events, keys interleaved, some visits joining later
EVENTS = [(f"u{i % 7}", (i * 37) % 900 + (i % 3) * 2) for i in range(400)]


@pytest.fixture(autouse=True, params=["cells", "bytes"])
def tiny_table(request, monkeypatch):
    if request.param == "cells":
        monkeypatch.setattr(partial, "MAX_CELLS", 3)
    else:
        monkeypatch.setattr(partial, "MAX_BYTES", 1500)


class SpanFn(beam.CombineFn):
    """(count, first, last) of the inputs: an accumulator that is not a plain number."""

    def create_accumulator(self):
        return (0, None, None)

    def add_input(self, acc, t):
        n, lo, hi = acc
        return (n + 1, t if lo is None else min(lo, t), t if hi is None else max(hi, t))

    def merge_accumulators(self, accs):
        out = self.create_accumulator()
        for n, lo, hi in accs:
            if n:
                out = (out[0] + n, lo if out[1] is None else min(out[1], lo),
                       hi if out[2] is None else max(out[2], hi))
        return out

    def extract_output(self, acc):
        return acc


class ScaledSumFn(beam.CombineFn):
    """The inputs' sum times the side input `scale`."""

    def create_accumulator(self, scale):
        return 0

    def add_input(self, acc, x, scale):
        return acc + x

    def merge_accumulators(self, accs, scale):
        return sum(accs)

    def extract_output(self, acc, scale):
        return acc * scale


def _sessions(gap):
    by_user = collections.defaultdict(list)
    for user, t in EVENTS:
        by_user[user].append(t)
    out = []
    for user, times in by_user.items():
        times.sort()
        start = times[0]
        cur = [times[0]]
        for t in times[1:]:
            if t < cur[-1] + gap:
                cur.append(t)
                continue
            out.append((user, start, cur[-1] + gap, (len(cur), cur[0], cur[-1])))
            start, cur = t, [t]
        out.append((user, start, cur[-1] + gap, (len(cur), cur[0], cur[-1])))
    return out


def _with_window(kv, w=beam.DoFn.WindowParam, ts=beam.DoFn.TimestampParam):
    return (kv[0], w.start.micros // US, w.end.micros // US, kv[1], ts.micros // US)


def test_sessions_combined_in_a_tiny_table(make_pipeline):
    gap = 30
    with make_pipeline(bundle_size=5) as p:
        out = (p | beam.Create(EVENTS)
               | beam.Map(lambda e: beam.TimestampedValue((e[0], e[1]), e[1]))
               | beam.WindowInto(window.Sessions(gap),
                                 timestamp_combiner=window.TimestampCombiner.OUTPUT_AT_EARLIEST)
               | beam.CombinePerKey(SpanFn())
               | beam.Map(_with_window))
        assert_that(out, equal_to([(u, s, e, acc, acc[1]) for u, s, e, acc in _sessions(gap)]))


def test_fixed_windows_combined_in_a_tiny_table(make_pipeline):
    expected = collections.Counter()
    for user, t in EVENTS:
        expected[(user, t // 60 * 60)] += t
    with make_pipeline(bundle_size=5) as p:
        out = (p | beam.Create(EVENTS)
               | beam.Map(lambda e: beam.TimestampedValue((e[0], e[1]), e[1]))
               | beam.WindowInto(window.FixedWindows(60))
               | beam.CombinePerKey(sum)
               | beam.Map(_with_window))
        assert_that(out, equal_to([(u, s, s + 60, v, s + 59) for (u, s), v in expected.items()]))


def test_a_combine_with_a_side_input_in_a_tiny_table(make_pipeline):
    expected = collections.Counter()
    for user, t in EVENTS:
        expected[(user, t // 60 * 60)] += t * 2
    with make_pipeline(bundle_size=5) as p:
        scale = p | "Scale" >> beam.Create([2])
        out = (p | beam.Create(EVENTS)
               | beam.Map(lambda e: beam.TimestampedValue((e[0], e[1]), e[1]))
               | beam.WindowInto(window.FixedWindows(60))
               | beam.CombinePerKey(ScaledSumFn(), scale=beam.pvalue.AsSingleton(scale))
               | beam.Map(_with_window))
        assert_that(out, equal_to([(u, s, s + 60, v, s + 59) for (u, s), v in expected.items()]))


def test_a_vectorised_combine_of_parquet_rows_in_a_tiny_table(make_pipeline, tmp_path):
    # The Spark runner's fast path (Arrow batches, a vectorised combiner) is bounded by the same
    # cell count: past it, the combiner's groups are emitted and it starts again.
    data = events(seed=3)
    files = write_files(tmp_path, data)
    assert_benchmark_shape_sums(make_pipeline, files, window.FixedWindows(3600), hourly_sums(data))
    assert_benchmark_shape_sums(make_pipeline, files, window.Sessions(600), sessions(data, 600 * 10**6))
