"""Beam's module paths and values a ported program uses: `utils.timestamp` (`Timestamp`
arithmetic and comparisons, `Timestamp.of`, `from_rfc3339`, `to_rfc3339`, `micros`, `seconds()`,
`predecessor / successor`, `Duration` arithmetic, `MIN_TIMESTAMP / MAX_TIMESTAMP` in micros),
computed inside a Map; `transforms.ptransform.ptransform_fn` and a `PTransform` subclass as
composites; the `assign` results of `window` functions; `runners.runner.PipelineState` values;
`beam.Partition` (a function and a `PartitionFn` with an extra argument), `beam.Flatten`,
`CoGroupByKey` (dict and tuple forms); and `testing.util.assert_that` with `equal_to`,
`equal_to_per_window`, `is_not_empty`, `is_empty`, `equal_to_approx`, `has_at_least_one`
(Beam's `matches_all` needs PyHamcrest, which Beam's virtualenv lacks)
inside the pipeline (the program passes only if every assertion holds).

Avoided (docs/beam-compatibility.md): Timestamps outside [MIN, MAX], comparing a Timestamp with a
Duration, `Duration.seconds()`, naive datetimes in `from_utc_datetime`; the global window's max
timestamp (Beam Python's is 1 µs before GLOBAL_WINDOW_MAX_TIMESTAMP_MILLIS, Beam Java's and
headrace's is that instant)."""

from _sdk import (
    MAX_TIMESTAMP,
    MIN_TIMESTAMP,
    Duration,
    PipelineState,
    PTransform,
    Timestamp,
    assert_that,
    beam,
    equal_to,
    ptransform_fn,
    testing_util,
    window,
)


def _timestamp_facts(i):
    """Lines about Timestamp / Duration values for seed i (run inside a Map)."""
    t = Timestamp(seconds=1_700_000_000 + i * 3601, micros=i * 137)
    d = Duration(seconds=i * 90 + 0.5)
    later = t + d
    rfc = later.to_rfc3339()
    back = Timestamp.from_rfc3339(rfc)
    return [
        f"ts {i} micros={t.micros} seconds={t.seconds()} plus={later.micros} minus={(t - d).micros}",
        f"ts {i} diff={(later - t).micros} mod={(t % 3600).micros}",
        f"ts {i} dmul={(d * 3).micros} dsum={(d + d).micros}",
        f"ts {i} rfc={rfc} back={back.micros} lt={t < later} eq={back == later} ge={t >= t}",
        f"ts {i} pred={t.predecessor().micros} succ={t.successor().micros}",
        f"ts {i} of={Timestamp.of(t.micros / 1e6).micros}",
        f"ts {i} of_int={Timestamp.of(1000 + i).micros} dur_of={Duration.of(i * 2).micros} neg={(-d).micros}",
        f"ts {i} cmp_num={t > 1_600_000_000} sub_num={(t - 60).micros} add_num={(t + 1.5).micros}",
    ]


def _window_facts(t):
    """The windows FixedWindows / SlidingWindows / Sessions assign to timestamp t (seconds)."""
    ctx = window.WindowFn.AssignContext(Timestamp.of(t))

    def fmt(ws):
        return sorted(f"[{w.start.micros}, {w.end.micros})" for w in ws)

    return [
        f"assign fixed {t} {fmt(window.FixedWindows(60).assign(ctx))}",
        f"assign fixed_offset {t} {fmt(window.FixedWindows(60, offset=15).assign(ctx))}",
        f"assign sliding {t} {fmt(window.SlidingWindows(60, 20).assign(ctx))}",
        f"assign sliding_offset {t} {fmt(window.SlidingWindows(90, 30, offset=10).assign(ctx))}",
        f"assign sessions {t} {fmt(window.Sessions(45).assign(ctx))}",
        f"assign global {t} {[type(w).__name__ for w in window.GlobalWindows().assign(ctx)]}",
    ]


@ptransform_fn
def CountWords(pcoll, min_length=1):
    """A ptransform_fn composite: (word, count) of words of at least min_length letters."""
    return (
        pcoll
        | "Split" >> beam.FlatMap(lambda line: line.split())
        | "Long" >> beam.Filter(lambda w: len(w) >= min_length)
        | "Count" >> beam.combiners.Count.PerElement()
    )


class TopWords(PTransform):
    """A PTransform subclass composite: the n most frequent words, as 'word:count' lines."""

    def __init__(self, n, label=None):
        super().__init__(label)
        self.n = n

    def expand(self, pcoll):
        return (
            pcoll
            | "CountAll" >> CountWords()
            | "Top" >> beam.combiners.Top.Of(self.n, key=lambda kv: (kv[1], kv[0]))
            | "Flat" >> beam.FlatMap(lambda top: [f"{w}:{n}" for w, n in top])
        )


class ByLength(beam.PartitionFn):
    """A PartitionFn with an extra argument: words by length, capped."""

    def partition_for(self, element, num_partitions, cap):
        return min(len(element), cap) % num_partitions


TEXT = [
    "the river runs past the old mill",
    "a weir holds the water back",
    "the mill race turns the wheel",
    "water over the weir",
    "flume sluice and lock",
    "the lock keeper opens the sluice",
]


def build(p, inputs):
    """Timestamp values, window assignments, composites, Partition / Flatten / CoGroupByKey and
    assertions."""
    outs = []
    outs.append(p | "Seeds" >> beam.Create(list(range(40))) | "TsFacts" >> beam.FlatMap(_timestamp_facts))
    outs.append(
        p
        | "Bounds" >> beam.Create([0])
        | "MinMax"
        >> beam.Map(
            lambda _: (
                f"bounds min={MIN_TIMESTAMP.micros} max={MAX_TIMESTAMP.micros} "
                f"rfc_epoch={Timestamp(0).to_rfc3339()}"
            )
        )
    )
    outs.append(
        p
        | "Times" >> beam.Create([0, 1, 59.999999, 60, 125, -1, -61.5, 1_700_000_000.25])
        | "Assign" >> beam.FlatMap(_window_facts)
    )
    states = [
        PipelineState.DONE,
        PipelineState.FAILED,
        PipelineState.RUNNING,
        PipelineState.CANCELLED,
        PipelineState.STOPPED,
        PipelineState.UNKNOWN,
        PipelineState.DRAINED,
        PipelineState.UPDATED,
    ]
    outs.append(
        p
        | "States" >> beam.Create([str(s.value) if hasattr(s, "value") else str(s) for s in states])
        | "FmtStates" >> beam.Map(lambda s: f"pipeline_state {s}")
    )

    lines = p | "Text" >> beam.Create(TEXT * 50)
    counts = lines | "CountWords" >> CountWords(min_length=4)
    outs.append(counts | "FmtCounts" >> beam.MapTuple(lambda w, n: f"count {w} {n}"))
    outs.append(lines | "TopWords" >> TopWords(5) | "FmtTop" >> beam.Map(lambda s: f"top {s}"))

    words = lines | "Words" >> beam.FlatMap(str.split)
    parts = words | "ByFirst" >> beam.Partition(lambda w, n: ord(w[0]) % n, 3)
    outs.append(
        (parts[0], parts[2])
        | "Flatten02" >> beam.Flatten()
        | "Distinct02" >> beam.Distinct()
        | "Fmt02" >> beam.Map(lambda w: f"partition_0_or_2 {w}")
    )
    outs.append(
        parts[1]
        | "Count1" >> beam.combiners.Count.Globally()
        | "Fmt1" >> beam.Map(lambda n: f"partition_1 {n}")
    )
    by_len = words | "ByLen" >> beam.Partition(ByLength(), 4, cap=6)
    for i in range(4):
        outs.append(
            by_len[i]
            | f"Distinct{i}" >> beam.Distinct()
            | f"Sorted{i}" >> beam.combiners.ToList()
            | f"FmtLen{i}" >> beam.Map(lambda ws, i=i: f"by_length {i} {sorted(ws)}")
        )

    emails = p | "Emails" >> beam.Create(
        [(f"u{i % 7}", f"u{i % 7}@{d}") for i, d in enumerate(["x.org", "y.com"] * 7)]
    )
    phones = p | "Phones" >> beam.Create([(f"u{i % 5}", f"555-{i:04d}") for i in range(12)])
    outs.append(
        {"emails": emails, "phones": phones}
        | "JoinDict" >> beam.CoGroupByKey()
        | "FmtJoin"
        >> beam.MapTuple(
            lambda k, g: f"join {k} emails={sorted(set(g['emails']))} phones={sorted(g['phones'])}"
        )
    )
    outs.append(
        (emails, phones)
        | "JoinTuple" >> beam.CoGroupByKey()
        | "FmtJoinT" >> beam.MapTuple(lambda k, g: f"join_tuple {k} {len(list(g[0]))} {len(list(g[1]))}")
    )

    # assertions inside the pipeline: the run fails if one does not hold
    U = testing_util
    assert_that(
        counts | "CountOfMill" >> beam.Filter(lambda kv: kv[0] == "mill"),
        equal_to([("mill", 100)]),
        label="AssertMill",
    )
    assert_that(words, U.is_not_empty(), label="AssertNotEmpty")
    assert_that(words | "NoX" >> beam.Filter(lambda w: "x" in w), U.is_empty(), label="AssertEmpty")
    assert_that(
        p | "Approx" >> beam.Create([0.1 + 0.2, 1 / 3]),
        U.equal_to_approx([0.3, 0.333333333333]),
        label="AssertApprox",
    )
    U.has_at_least_one(words, lambda w, t, win, pane: w == "keeper", label="HasKeeper")
    stamped = (
        p
        | "Stamped" >> beam.Create([(v, t) for v, t in [(1, 5), (2, 65), (3, 70), (4, 130)]])
        | "Stamp" >> beam.MapTuple(lambda v, t: window.TimestampedValue(v, t))
        | "Fixed" >> beam.WindowInto(window.FixedWindows(60))
    )
    summed = stamped | "SumPerWindow" >> beam.CombineGlobally(sum).without_defaults()
    assert_that(
        summed,
        U.equal_to_per_window(
            {
                window.IntervalWindow(0, 60): [1],
                window.IntervalWindow(60, 120): [5],
                window.IntervalWindow(120, 180): [4],
            }
        ),
        label="AssertPerWindow",
    )
    assert_that(summed, equal_to([1, 5, 4]), label="AssertWindowedValues")
    outs.append(p | "Passed" >> beam.Create(["assertions_built 7"]))
    return outs | beam.Flatten()
