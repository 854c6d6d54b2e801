"""Re-windowing: an element in n windows is n elements (the Dataflow paper, section 2.2:
AssignWindows duplicates the element), so a second WindowInto maps each copy on its own.

Sliding windows of size 6 every 2 put an element into three windows; WindowInto(FixedWindows)
afterwards puts all three copies into the element's one fixed window, so a GroupByKey sees the
value three times (Apache Beam's Python SDK gives the same). The same holds for re-windowing
into the global window, sessions or other sliding windows, for lifted combines, side inputs,
DoFns that read their window, and the Read -> plain steps -> CombinePerKey shape that the Spark
runner runs over columnar bundles. Expectations are computed here with plain Python from the
window definitions: [start, start + size) with starts at multiples of the period (or size).
"""

from __future__ import annotations

import collections

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import headrace as beam
from headrace.testing.util import assert_that, equal_to
from headrace.transforms import window
from headrace.transforms.window import IntervalWindow, NonMergingWindowFn

TV = beam.TimestampedValue
US = 1_000_000


def sliding_starts(t, size, period):
    """Starts of the sliding windows [s, s + size), s a multiple of `period`, that contain t."""
    return [s for s in range(t - size + 1, t + 1) if s % period == 0]


def fixed_start(t, size):
    return t - t % size


def session_windows(times, gap):
    """[(start, end)] of the sessions of one key: [t, t + gap) windows merge when they overlap."""
    out = []
    for t in sorted(times):
        if out and t < out[-1][1]:
            out[-1][1] = max(out[-1][1], t + gap)
        else:
            out.append([t, t + gap])
    return [tuple(w) for w in out]


def session_of(t, sessions):
    return next((s, e) for s, e in sessions if s <= t < e)


class Grouped(beam.DoFn):
    """(key, sorted values, window start s, window end s) after a GroupByKey or Combine."""

    def process(self, kv, w=beam.DoFn.WindowParam):
        k, v = kv
        v = sorted(v) if isinstance(v, list) else v
        if isinstance(w, window.GlobalWindow):
            yield (k, v, "global")
        else:
            yield (k, v, int(w.start), int(w.end))


def events(data):
    return [TV((k, v), t) for k, v, t in data]


# the brief's example: values 0..9 at 0..9 s, one key
TEN = [("k", i, i) for i in range(10)]
# two keys, gaps, several bundles
SPREAD = [("a", 1, 0), ("b", 2, 1), ("a", 3, 3), ("a", 4, 4), ("b", 5, 7), ("a", 6, 8),
          ("a", 7, 15), ("b", 8, 16), ("a", 9, 17), ("b", 10, 30)]


@pytest.mark.parametrize("data,size,period,fixed", [(TEN, 6, 2, 5), (SPREAD, 5, 2, 4)])
def test_sliding_then_fixed_group_by_key(make_pipeline, data, size, period, fixed):
    """Each copy of a sliding-windowed element lands in the element's fixed window; with
    Sliding(5, 2) even seconds are in 3 windows and odd ones in 2."""
    groups = collections.defaultdict(list)
    for k, v, t in data:
        for _ in sliding_starts(t, size, period):
            groups[(k, fixed_start(t, fixed))].append(v)
    expected = [(k, sorted(vs), s, s + fixed) for (k, s), vs in groups.items()]
    with make_pipeline(bundle_size=3) as p:
        out = (p | beam.Create(events(data))
               | "Sliding" >> beam.WindowInto(window.SlidingWindows(size, period))
               | "Fixed" >> beam.WindowInto(window.FixedWindows(fixed))
               | beam.GroupByKey()
               | beam.ParDo(Grouped()))
        assert_that(out, equal_to(expected))


def test_sliding_then_global_group_by_key(make_pipeline):
    groups = collections.defaultdict(list)
    for k, v, t in SPREAD:
        groups[k].extend([v] * len(sliding_starts(t, 5, 2)))
    with make_pipeline(bundle_size=4) as p:
        out = (p | beam.Create(events(SPREAD))
               | "Sliding" >> beam.WindowInto(window.SlidingWindows(5, 2))
               | "Global" >> beam.WindowInto(window.GlobalWindows())
               | beam.GroupByKey()
               | beam.ParDo(Grouped()))
        assert_that(out, equal_to([(k, sorted(vs), "global") for k, vs in groups.items()]))


def test_sliding_then_sessions_group_by_key(make_pipeline):
    """The copies of an element open identical proto-sessions; they merge like the originals
    and the session holds the value once per copy."""
    gap = 2
    by_key = collections.defaultdict(list)
    for k, v, t in SPREAD:
        by_key[k].append(t)
    groups = collections.defaultdict(list)
    for k, v, t in SPREAD:
        groups[(k, session_of(t, session_windows(by_key[k], gap)))].extend(
            [v] * len(sliding_starts(t, 6, 2)))
    expected = [(k, sorted(vs), s, e) for (k, (s, e)), vs in groups.items()]
    with make_pipeline(bundle_size=2) as p:
        out = (p | beam.Create(events(SPREAD))
               | "Sliding" >> beam.WindowInto(window.SlidingWindows(6, 2))
               | "Sessions" >> beam.WindowInto(window.Sessions(gap))
               | beam.GroupByKey()
               | beam.ParDo(Grouped()))
        assert_that(out, equal_to(expected))


def test_sliding_then_sliding_counts_every_copy(make_pipeline):
    """Each of an element's windows of Sliding(6, 2) gets every window of Sliding(4, 2)."""
    counts = collections.Counter()
    for k, _, t in SPREAD:
        for _ in sliding_starts(t, 6, 2):
            for s in sliding_starts(t, 4, 2):
                counts[(k, s)] += 1
    with make_pipeline(bundle_size=3) as p:
        out = (p | beam.Create(events(SPREAD))
               | "Sliding6" >> beam.WindowInto(window.SlidingWindows(6, 2))
               | "Sliding4" >> beam.WindowInto(window.SlidingWindows(4, 2))
               | beam.combiners.Count.PerKey()
               | beam.ParDo(Grouped()))
        assert_that(out, equal_to([(k, c, s, s + 4) for (k, s), c in counts.items()]))


def test_sliding_then_fixed_lifted_combines(make_pipeline):
    """CombinePerKey(sum), Count.PerKey and CombineGlobally(sum) (combined before the shuffle
    on Spark) add every copy."""
    sums, counts, totals = collections.Counter(), collections.Counter(), collections.Counter()
    for k, v, t in SPREAD:
        n = len(sliding_starts(t, 5, 2))
        s = fixed_start(t, 4)
        sums[(k, s)] += v * n
        counts[(k, s)] += n
        totals[s] += v * n
    with make_pipeline(bundle_size=3) as p:
        fixed = (p | beam.Create(events(SPREAD))
                 | "Sliding" >> beam.WindowInto(window.SlidingWindows(5, 2))
                 | "Fixed" >> beam.WindowInto(window.FixedWindows(4)))
        summed = fixed | "Sum" >> beam.CombinePerKey(sum) | "SumWindows" >> beam.ParDo(Grouped())
        counted = fixed | "Count" >> beam.combiners.Count.PerKey() | "CountWindows" >> beam.ParDo(Grouped())
        total = (fixed | beam.Values()
                 | "Total" >> beam.CombineGlobally(sum).without_defaults()
                 | "TotalWindows" >> beam.Map(lambda v, w=beam.DoFn.WindowParam: (v, int(w.start))))
        assert_that(summed, equal_to([(k, v, s, s + 4) for (k, s), v in sums.items()]), label="sum")
        assert_that(counted, equal_to([(k, c, s, s + 4) for (k, s), c in counts.items()]),
                    label="count")
        assert_that(total, equal_to([(v, s) for s, v in totals.items()]), label="total")


def test_sliding_then_sessions_lifted_combines(make_pipeline):
    """Lifted combines into merging windows (accumulators merged before the shuffle on Spark)."""
    gap = 3
    by_key = collections.defaultdict(list)
    for k, v, t in SPREAD:
        by_key[k].append(t)
    sums, counts = collections.Counter(), collections.Counter()
    for k, v, t in SPREAD:
        n = len(sliding_starts(t, 5, 2))
        w = session_of(t, session_windows(by_key[k], gap))
        sums[(k, w)] += v * n
        counts[(k, w)] += n
    with make_pipeline(bundle_size=2) as p:
        sessions = (p | beam.Create(events(SPREAD))
                    | "Sliding" >> beam.WindowInto(window.SlidingWindows(5, 2))
                    | "Sessions" >> beam.WindowInto(window.Sessions(gap)))
        summed = sessions | "Sum" >> beam.CombinePerKey(sum) | "SumWindows" >> beam.ParDo(Grouped())
        counted = (sessions | "Count" >> beam.combiners.Count.PerKey()
                   | "CountWindows" >> beam.ParDo(Grouped()))
        assert_that(summed, equal_to([(k, v, s, e) for (k, (s, e)), v in sums.items()]), label="sum")
        assert_that(counted, equal_to([(k, c, s, e) for (k, (s, e)), c in counts.items()]),
                    label="count")


def test_a_dofn_reading_its_window_sees_every_copy(make_pipeline):
    expected = [(v, fixed_start(t, 5)) for _, v, t in TEN for _ in sliding_starts(t, 6, 2)]
    with make_pipeline(bundle_size=4) as p:
        out = (p | beam.Create(events(TEN))
               | "Sliding" >> beam.WindowInto(window.SlidingWindows(6, 2))
               | "Fixed" >> beam.WindowInto(window.FixedWindows(5))
               | beam.Map(lambda kv, w=beam.DoFn.WindowParam: (kv[1], int(w.start))))
        assert_that(out, equal_to(expected))


def test_a_side_input_after_re_windowing_holds_every_copy(make_pipeline):
    expected = sorted(v for _, v, t in SPREAD for _ in sliding_starts(t, 5, 2))
    with make_pipeline(bundle_size=3) as p:
        side = (p | "Events" >> beam.Create(events(SPREAD))
                | "Sliding" >> beam.WindowInto(window.SlidingWindows(5, 2))
                | "Global" >> beam.WindowInto(window.GlobalWindows())
                | beam.Values())
        out = (p | "Once" >> beam.Create([None])
               | beam.Map(lambda _, vs: sorted(vs), beam.pvalue.AsList(side)))
        assert_that(out, equal_to([expected]))


class OddSecondsOnly(NonMergingWindowFn):
    """Odd seconds -> [0, 100); even seconds -> no window at all."""

    def assign(self, context):
        return [IntervalWindow(0, 100)] if (context.timestamp.micros // US) % 2 else []


class FiveSecondHalves(NonMergingWindowFn):
    """[0, 5) or [5, 10) by timestamp, whatever the element's current window."""

    def assign(self, context):
        start = context.timestamp.micros // US // 5 * 5
        return [IntervalWindow(start, start + 5)]


def test_an_element_in_no_window_stays_in_none(make_pipeline):
    """Zero windows are zero elements: re-windowing into fixed or global windows does not
    bring them back."""
    fixed = collections.defaultdict(list)
    for k, v, t in TEN:
        if t % 2:
            fixed[(k, fixed_start(t, 5))].append(v)
    with make_pipeline(bundle_size=3) as p:
        odd = p | beam.Create(events(TEN)) | "Odd" >> beam.WindowInto(OddSecondsOnly())
        by_fixed = (odd | "Fixed" >> beam.WindowInto(window.FixedWindows(5))
                    | "GroupFixed" >> beam.GroupByKey() | "FixedWindows" >> beam.ParDo(Grouped()))
        by_global = (odd | "Global" >> beam.WindowInto(window.GlobalWindows())
                     | "GroupGlobal" >> beam.GroupByKey() | "GlobalWindow" >> beam.ParDo(Grouped()))
        assert_that(by_fixed, equal_to([(k, vs, s, s + 5) for (k, s), vs in fixed.items()]),
                    label="fixed")
        assert_that(by_global, equal_to([("k", [v for _, v, t in TEN if t % 2], "global")]),
                    label="global")


def test_a_user_window_fn_maps_each_copy(make_pipeline):
    """A user's WindowFn that ignores the current window gives every copy the same window."""
    groups = collections.defaultdict(list)
    for k, v, t in TEN:
        groups[(k, fixed_start(t, 5))].extend([v] * len(sliding_starts(t, 6, 2)))
    with make_pipeline(bundle_size=3) as p:
        out = (p | beam.Create(events(TEN))
               | "Sliding" >> beam.WindowInto(window.SlidingWindows(6, 2))
               | "Halves" >> beam.WindowInto(FiveSecondHalves())
               | beam.GroupByKey()
               | beam.ParDo(Grouped()))
        assert_that(out, equal_to([(k, sorted(vs), s, s + 5) for (k, s), vs in groups.items()]))


# ---- Read -> plain steps -> CombinePerKey (the Spark runner's columnar / vectorised path) ----

ROWS = [(k, v, t) for k, v, t in
        [("a", 3, 0), ("b", 5, 299), ("a", 7, 300), ("c", 11, 601), ("a", 13, 1234),
         ("b", 17, 1500), ("c", 19, 1799), ("a", 23, 2400)] * 40]


def _read_sums(size, period, fixed):
    sums = collections.Counter()
    for k, v, t in ROWS:
        sums[(k, fixed_start(t, fixed))] += v * len(sliding_starts(t, size, period))
    return [(k, v, s, s + fixed) for (k, s), v in sums.items()]


@pytest.fixture
def parquet_files(tmp_path):
    for i in range(3):
        part = ROWS[i::3]
        pq.write_table(pa.table({"key": [r[0] for r in part], "value": [r[1] for r in part],
                                 "ts": [r[2] for r in part]}),
                       tmp_path / f"part-{i}.parquet", row_group_size=25)
    return str(tmp_path / "*.parquet")


@pytest.fixture
def text_file(tmp_path):
    path = tmp_path / "events.csv"
    path.write_text("".join(f"{k},{v},{t}\n" for k, v, t in ROWS))
    return str(path)


def _parse(line):
    k, v, t = line.split(",")
    return TV((k, int(v)), int(t))


@pytest.mark.parametrize("size,period,fixed", [(900, 300, 600), (700, 300, 500)])
def test_read_parquet_sliding_then_fixed_sum(make_pipeline, parquet_files, size, period, fixed):
    with make_pipeline(bundle_size=16) as p:
        out = (p | beam.io.ReadFromParquet(parquet_files)
               | beam.Map(lambda r: TV((r["key"], r["value"]), r["ts"]))
               | "Sliding" >> beam.WindowInto(window.SlidingWindows(size, period))
               | "Fixed" >> beam.WindowInto(window.FixedWindows(fixed))
               | beam.CombinePerKey(sum)
               | beam.ParDo(Grouped()))
        assert_that(out, equal_to(_read_sums(size, period, fixed)))


def test_read_text_sliding_then_fixed_sum(make_pipeline, text_file):
    with make_pipeline(bundle_size=16) as p:
        out = (p | beam.io.ReadFromText(text_file)
               | beam.Map(_parse)
               | "Sliding" >> beam.WindowInto(window.SlidingWindows(700, 300))
               | "Fixed" >> beam.WindowInto(window.FixedWindows(500))
               | beam.CombinePerKey(sum)
               | beam.ParDo(Grouped()))
        assert_that(out, equal_to(_read_sums(700, 300, 500)))


def test_read_parquet_fixed_then_global_sum(make_pipeline, parquet_files):
    """One window in, one out: the vectorised path's shape, each element counted once."""
    sums = collections.Counter()
    for k, v, _ in ROWS:
        sums[k] += v
    with make_pipeline() as p:
        out = (p | beam.io.ReadFromParquet(parquet_files)
               | beam.Map(lambda r: TV((r["key"], r["value"]), r["ts"]))
               | "Fixed" >> beam.WindowInto(window.FixedWindows(600))
               | "Global" >> beam.WindowInto(window.GlobalWindows())
               | beam.CombinePerKey(sum)
               | beam.ParDo(Grouped()))
        assert_that(out, equal_to([(k, v, "global") for k, v in sums.items()]))
