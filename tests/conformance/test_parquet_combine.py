"""ReadFromParquet -> Map / Filter / WindowInto -> CombinePerKey(builtin): the shape the Spark
runner evaluates vectorised over Arrow batches. Every runner must give exactly the answers (values
and Python types), errors and metrics of element-by-element execution, computed here with plain
Python from the generated files."""

from __future__ import annotations

import collections
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import headrace as beam
from headrace.errors import PipelineExecutionError
from headrace.testing.util import assert_that, equal_to
from headrace.transforms import window
from tests._support import counter_value

TV = beam.window.TimestampedValue
KEYS = ["a", "b", "c", "d", "é"]


def write_files(directory, columns, n_files=4, types=None):
    """Writes the columns (name -> list) as `n_files` Parquet files of row groups of 50 rows."""
    n = len(next(iter(columns.values())))
    step = -(-n // n_files)
    schema = pa.schema([(name, (types or {}).get(name) or pa.array(v).type) for name, v in columns.items()])
    for i in range(n_files):
        part = {name: v[i * step:(i + 1) * step] for name, v in columns.items()}
        pq.write_table(pa.table(part, schema=schema), directory / f"part-{i}.parquet", row_group_size=50)
    return str(directory / "*.parquet")


def events(n=1200, seed=0):
    """Rows with a str key, an int key, an int value and a time in milliseconds; per key, some
    events exactly 600 s after another and some 599.999 s after another."""
    rnd = random.Random(seed)
    rows = []
    for _ in range(n // 3):
        k, t = rnd.choice(KEYS), rnd.randint(0, 20 * 3600 * 1000)
        for dt in (0, 600_000, rnd.choice([599_999, 1_200_000, 600_000])):
            rows.append((k, KEYS.index(k) * 10 - 17, rnd.randint(-50, 1000), t + dt))
            t += dt
    rnd.shuffle(rows)
    return {"key": [r[0] for r in rows], "ikey": [r[1] for r in rows], "value": [r[2] for r in rows],
            "ts_ms": [r[3] for r in rows]}


@pytest.fixture(scope="module")
def data():
    return events()


@pytest.fixture
def files(tmp_path, data):
    return write_files(tmp_path, data)


def rows_of(data):
    return [dict(zip(data, r)) for r in zip(*data.values())]


def micros(ts_ms):
    return TV(None, ts_ms / 1000.0).timestamp_us


def with_window(kv, w=beam.DoFn.WindowParam):
    return (kv[0], w.start.micros, w.end.micros, kv[1], type(kv[1]).__name__)


def assert_benchmark_shape_sums(make_pipeline, files, windowfn, sums):
    """ReadFromParquet | Map(TimestampedValue((key, value), ts_ms / 1000.0)) | WindowInto(windowfn)
    | sum per key gives `sums` ({(key, window start, window end): int sum})."""
    with make_pipeline() as p:
        out = (p | beam.io.ReadFromParquet(files)
               | beam.Map(lambda r: beam.window.TimestampedValue((r["key"], r["value"]), r["ts_ms"] / 1000.0))
               | beam.WindowInto(windowfn)
               | beam.CombinePerKey(sum)
               | beam.Map(with_window))
        assert_that(out, equal_to([(k, s, e, v, "int") for (k, s, e), v in sums.items()]))


def test_benchmark_shape_fixed_windows_sum(make_pipeline, files, data):
    """Map(TimestampedValue((key, value), ts_ms / 1000.0)) | FixedWindows(3600) | sum per key."""
    assert_benchmark_shape_sums(make_pipeline, files, window.FixedWindows(3600), hourly_sums(data))


def hourly_sums(data):
    """{(key, start, end): sum} of the rows in fixed windows of an hour."""
    size = 3600 * 10**6
    sums = collections.Counter()
    for r in rows_of(data):
        start = micros(r["ts_ms"]) // size * size
        sums[(r["key"], start, start + size)] += r["value"]
    return sums


def sessions(data, gap_us):
    """{(key, start, end): sum} of sessions: [t, t + gap) windows merge only when they overlap."""
    by_key = collections.defaultdict(list)
    for r in rows_of(data):
        by_key[r["key"]].append((micros(r["ts_ms"]), r["value"]))
    out = {}
    for k, items in by_key.items():
        current = None
        for t, v in sorted(items):
            if current is None or t >= current[1]:
                current = [t, t + gap_us, 0]
                out[(k, t)] = current
            current[1] = max(current[1], t + gap_us)
            current[2] += v
    return {(k, s, e): v for (k, _), (s, e, v) in out.items()}


def test_benchmark_shape_sessions_sum(make_pipeline, files, data):
    """Sessions(600): events exactly 600 s apart stay apart, 599.999 s apart merge."""
    expected = sessions(data, 600 * 10**6)
    gaps = collections.Counter()
    for k in KEYS:
        ts = sorted(t for kk, t in zip(data["key"], data["ts_ms"]) if kk == k)
        gaps.update(b - a for a, b in zip(ts, ts[1:]))
    assert gaps[600_000] and gaps[599_999]
    assert_benchmark_shape_sums(make_pipeline, files, window.Sessions(600), expected)


@pytest.mark.parametrize("windowfn", [window.FixedWindows(3600), window.Sessions(600)], ids=repr)
def test_sums_are_the_same_when_the_shuffled_groups_spill(make_pipeline, files, data, windowfn, monkeypatch):
    """A sort budget of 2,000 bytes: a Spark runner's reduce side spills the map side's columnar
    blocks in sub-buckets of keys (and would spill records in sorted runs); the same sums."""
    from headrace.runners.spark.batch import translation
    monkeypatch.setattr(translation, "sort_budget", lambda sc: 2_000.0)
    expected = hourly_sums(data) if isinstance(windowfn, window.FixedWindows) else sessions(data, 600 * 10**6)
    assert_benchmark_shape_sums(make_pipeline, files, windowfn, expected)


def test_builtin_combiners_in_the_global_window(make_pipeline, files, data):
    """Mean, count, min and max per key (no WindowInto): values and types as element by element."""
    by_key = collections.defaultdict(list)
    for r in rows_of(data):
        by_key[r["key"]].append(r["value"])
    fns = {"Mean": (beam.combiners.MeanCombineFn(), lambda vs: sum(vs) / len(vs)),
           "Count": (beam.combiners.CountCombineFn(), len), "Min": (min, min), "Max": (max, max)}
    with make_pipeline() as p:
        for name, (fn, expect) in fns.items():
            out = (p | f"Read{name}" >> beam.io.ReadFromParquet(files)
                   | f"Pair{name}" >> beam.Map(lambda r: (r["key"], r["value"]))
                   | f"Combine{name}" >> beam.CombinePerKey(fn)
                   | f"Typed{name}" >> beam.Map(lambda kv: (kv[0], kv[1], type(kv[1]).__name__)))
            expected = [(k, expect(vs), type(expect(vs)).__name__) for k, vs in by_key.items()]
            assert_that(out, equal_to(expected), label=f"Check{name}")


def test_filter_then_map_with_int_keys(make_pipeline, files, data):
    """Filter | Map to int keys and doubled values | sum."""
    sums = collections.Counter()
    for r in rows_of(data):
        if r["value"] % 3 != 0:
            sums[r["ikey"]] += r["value"] * 2
    with make_pipeline() as p:
        out = (p | beam.io.ReadFromParquet(files)
               | beam.Filter(lambda r: r["value"] % 3 != 0)
               | beam.Map(lambda r: (r["ikey"], r["value"] * 2))
               | beam.CombinePerKey(sum))
        assert_that(out, equal_to(list(sums.items())))


def test_rows_read_as_attributes(make_pipeline, files, data):
    """ReadFromParquet(as_rows=True) | Map(r.key, r.value) | sum."""
    sums = collections.Counter()
    for r in rows_of(data):
        sums[r["key"]] += r["value"] - 1
    with make_pipeline() as p:
        out = (p | beam.io.ReadFromParquet(files, as_rows=True)
               | beam.Map(lambda r: (r.key, r.value - 1))
               | beam.CombinePerKey(sum))
        assert_that(out, equal_to(list(sums.items())))


@pytest.fixture
def null_files(tmp_path, data):
    rnd = random.Random(5)
    cols = dict(data, maybe=[None if rnd.random() < 0.02 else v for v in data["value"]])
    assert cols["maybe"].count(None) > 0
    return write_files(tmp_path, cols, types={"maybe": pa.int64()}), cols


def test_a_column_with_nulls_read_after_a_filter(make_pipeline, null_files):
    """Filter(r["maybe"] is not None) | Map((key, maybe)) | sum: null rows are dropped exactly."""
    pattern, cols = null_files
    sums = collections.Counter()
    for r in rows_of(cols):
        if r["maybe"] is not None:
            sums[r["key"]] += r["maybe"]
    with make_pipeline() as p:
        out = (p | beam.io.ReadFromParquet(pattern)
               | beam.Filter(lambda r: r["maybe"] is not None)
               | beam.Map(lambda r: (r["key"], r["maybe"]))
               | beam.CombinePerKey(sum))
        assert_that(out, equal_to(list(sums.items())))


def test_a_metric_in_the_map_counts_every_row_once(make_pipeline, files, data):
    """A Map that increments a counter is never vectorised: the committed count is the row count."""
    def counted(r):
        beam.metrics.Metrics.counter("parquet_combine", "rows").inc()
        return (r["key"], r["value"])

    p = make_pipeline()
    out = p | beam.io.ReadFromParquet(files) | beam.Map(counted) | beam.CombinePerKey(sum)
    sums = collections.Counter()
    for r in rows_of(data):
        sums[r["key"]] += r["value"]
    assert_that(out, equal_to(list(sums.items())))
    assert counter_value(p.run(), "rows") == len(data["key"])


def test_division_by_a_zero_column_value_fails_naming_the_step(make_pipeline, tmp_path, data):
    """One zero divisor: the pipeline fails with the Map step's label, as element by element."""
    cols = dict(data, div=[1 + i % 7 for i in range(len(data["key"]))])
    cols["div"][len(cols["div"]) // 2] = 0
    pattern = write_files(tmp_path, cols)
    p = make_pipeline(max_bundle_attempts=1)
    (p | beam.io.ReadFromParquet(pattern)
     | "DivideByDiv" >> beam.Map(lambda r: (r["key"], r["value"] / r["div"]))
     | beam.CombinePerKey(sum))
    with pytest.raises(PipelineExecutionError) as info:
        p.run()
    assert "DivideByDiv" in str(info.value)


def test_int_sums_beyond_int64_are_exact(make_pipeline, tmp_path):
    """Values around 2**61 summed over many rows: the exact Python int, on every runner."""
    rnd = random.Random(9)
    keys = [rnd.choice("xy") for _ in range(400)]
    values = [2**61 + rnd.randint(-10**6, 10**6) for _ in keys]
    sums = collections.Counter()
    for k, v in zip(keys, values):
        sums[k] += v
    assert max(sums.values()) > 2**63
    pattern = write_files(tmp_path, {"key": keys, "value": values, "ts_ms": [0] * len(keys)})
    with make_pipeline() as p:
        out = (p | beam.io.ReadFromParquet(pattern)
               | beam.Map(lambda r: (r["key"], r["value"]))
               | beam.CombinePerKey(sum)
               | beam.Map(lambda kv: (kv[0], kv[1], type(kv[1]).__name__)))
        assert_that(out, equal_to([(k, v, "int") for k, v in sums.items()]))


# ---- regressions of the vectorised path: wrong answers found in review ----------------------

def test_an_f_string_key_is_the_formatted_value(make_pipeline, files, data, runner, request):
    """Map((f"{key}", value)) | sum: keys are the formatted column values."""
    sums = collections.Counter()
    for r in rows_of(data):
        sums[f"k{r['ikey']}"] += r["value"]
    with make_pipeline() as p:
        out = (p | beam.io.ReadFromParquet(files)
               | beam.Map(lambda r: (f"k{r['ikey']}", r["value"]))
               | beam.CombinePerKey(sum))
        assert_that(out, equal_to(list(sums.items())))


def test_counting_non_null_values_with_is_not_none(make_pipeline, null_files, runner, request):
    """Filter(r["maybe"] is not None) | Map((key, 1)) | sum counts only the non-null rows."""
    pattern, cols = null_files
    counts = collections.Counter(r["key"] for r in rows_of(cols) if r["maybe"] is not None)
    with make_pipeline() as p:
        out = (p | beam.io.ReadFromParquet(pattern)
               | beam.Filter(lambda r: r["maybe"] is not None)
               | beam.Map(lambda r: (r["key"], 1))
               | beam.CombinePerKey(sum))
        assert_that(out, equal_to(list(counts.items())))


def test_an_unused_failing_expression_still_fails(make_pipeline, tmp_path, data, runner, request):
    """A Map whose discarded sub-expression divides by zero fails as element by element."""
    cols = dict(data, div=[1] * len(data["key"]))
    cols["div"][7] = 0
    pattern = write_files(tmp_path, cols)
    p = make_pipeline(max_bundle_attempts=1)
    (p | beam.io.ReadFromParquet(pattern)
     | "CheckedPair" >> beam.Map(lambda r: (r["key"], (r["value"], r["value"] // r["div"])[0]))
     | beam.CombinePerKey(sum))
    with pytest.raises(PipelineExecutionError) as info:
        p.run()
    assert "CheckedPair" in str(info.value)


def test_int_sums_stay_exact_ints_when_another_file_has_floats(make_pipeline, tmp_path, runner, request):
    """Files whose value column is int64 or float64: a key only in int files sums to an exact int."""
    for i in range(6):
        floats = i % 2 == 1
        cols = {"key": ["b"] * 60 if floats else ["a", "b"] * 30,
                "value": [0.5] * 60 if floats else [2**54 + 1] * 60}
        pq.write_table(pa.table(cols), tmp_path / f"part-{i}.parquet", row_group_size=50)
    with make_pipeline() as p:
        out = (p | beam.io.ReadFromParquet(str(tmp_path / "*.parquet"))
               | beam.Map(lambda r: (r["key"], r["value"]))
               | beam.CombinePerKey(sum)
               | beam.Filter(lambda kv: kv[0] == "a")
               | beam.Map(lambda kv: (kv[0], kv[1], type(kv[1]).__name__)))
        assert_that(out, equal_to([("a", 3 * 30 * (2**54 + 1), "int")]))
