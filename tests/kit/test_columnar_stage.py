"""The columnar run of fused stages (headrace.runners.kit.columnar) against the per-element path.

Every test runs the same thing with `kit.columnar.COLUMNAR` on and off and compares: outputs
(per output, in order, with timestamps, windows, panes and retraction flags), dead letters,
metrics, errors and attempt counts. The property test builds random pipelines through the
public API on the LocalRunner.
"""

from __future__ import annotations

import collections
import os
import tempfile
from typing import Any, Dict, List, Tuple

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import headrace as beam
from headrace.errors import PipelineExecutionError
from headrace.metrics.metric import Metrics, MetricsContainer
from headrace.model import coders
from headrace.model.window import GLOBAL_WINDOWS_TUPLE, FixedWindows, GlobalWindow, IntervalWindow
from headrace.model.windowed import PaneInfo, PaneInfoTiming, TimestampedValue, WindowedValue
from headrace.options.pipeline_options import PipelineOptions
from headrace.pipeline.dofn import _CallableWrapperDoFn
from headrace.runners.kit import columnar
from headrace.runners.kit.columnar import Columns, StagePlan
from headrace.runners.kit.stage import FusedStage, StepSpec
from headrace.transforms import window
from headrace.transforms.trigger import AccumulationMode, AfterCount, Repeatedly
from headrace.testing.util import assert_that, equal_to
from tests._support import Journal, Once

# ---- helpers ----------------------------------------------------------------------------------


class Collect(beam.DoFn):
    """Writes every element with its metadata to a journal, under the output's name."""

    def __init__(self, journal: Journal, name: str) -> None:
        self.journal, self.name = journal, name

    def process(self, x, ts=beam.DoFn.TimestampParam, w=beam.DoFn.WindowParam,
                pane=beam.DoFn.PaneInfoParam, retraction=beam.DoFn.RetractionParam):
        self.journal.write(self.name, repr(x), ts.micros, repr(w), repr(pane), bool(retraction))
        return ()


class CountPerBundle(beam.DoFn):
    """Passes elements on and emits how many it saw in finish_bundle."""

    def start_bundle(self):
        self.n = 0

    def process(self, x):
        self.n += 1
        Metrics.counter("diff", "dofn_elements").inc()
        yield x

    def finish_bundle(self):
        yield WindowedValue(1000 + self.n, 0, GLOBAL_WINDOWS_TUPLE)


class ReadsWindow(beam.DoFn):
    """Reads the window (a DoFn parameter: never a list operation)."""

    def process(self, x, w=beam.DoFn.WindowParam):
        yield x + (0 if isinstance(w, GlobalWindow) else 1)


def _fails_on(k: int):
    def parse(x):
        if x % 11 == k:
            raise ValueError(f"bad {x}")
        return x + 1
    return parse


def _count(x):
    Metrics.counter("diff", "mapped").inc(x % 3)
    Metrics.distribution("diff", "sizes").update(x)
    return x


def _gen(x, k):
    if x % 2:
        yield x
        yield x + k


def _apply(pc: Any, kind: str, k: int, label: str, leaves: List[Tuple[str, Any]]) -> Any:
    """One random step of the property test (values stay ints)."""
    if kind == "map":
        return pc | label >> beam.Map(lambda x, k=k: x * k + 1)
    if kind == "stamp":
        return pc | label >> beam.Map(lambda x, k=k: TimestampedValue(x, x % 17 + k))
    if kind == "maptuple":
        return (pc | label >> beam.Map(lambda x, k=k: (x, k))
                | label + "T" >> beam.MapTuple(lambda a, b: a + b))
    if kind == "flatmap":
        return pc | label >> beam.FlatMap(lambda x, k=k: None if x % 7 == k else [x] * (x % 3))
    if kind == "flatgen":
        return pc | label >> beam.FlatMap(_gen, k)
    if kind == "filter":
        return pc | label >> beam.Filter(lambda x, k=k: x % (k + 1))
    if kind == "fixed":
        return pc | label >> beam.WindowInto(window.FixedWindows(3 * k))
    if kind == "sliding":
        return pc | label >> beam.WindowInto(window.SlidingWindows(4 * k, 2))
    if kind == "sessions":
        return pc | label >> beam.WindowInto(window.Sessions(k))
    if kind == "deadletter":
        good, bad = pc | label >> beam.Map(_fails_on(k)).with_exception_handling()
        leaves.append((label + ".bad", bad | label + "B" >> beam.Map(
            lambda b: (b[0], b[1][0].__name__, b[1].step))))
        return good
    if kind == "dofn":
        return pc | label >> beam.ParDo(CountPerBundle())
    if kind == "window_param":
        return pc | label >> beam.ParDo(ReadsWindow())
    if kind == "counter":
        return pc | label >> beam.Map(_count)
    if kind == "group":
        return (pc | label >> beam.Map(lambda x, k=k: (x % k, x))
                | label + "G" >> beam.GroupByKey()
                | label + "V" >> beam.FlatMap(lambda kv: sorted(kv[1])))
    if kind == "retract":
        return (pc | label >> beam.WindowInto(window.GlobalWindows(), trigger=Repeatedly(AfterCount(2)),
                                               accumulation_mode=AccumulationMode.ACCUMULATING_AND_RETRACTING)
                | label + "K" >> beam.Map(lambda x, k=k: (x % k, x))
                | label + "C" >> beam.CombinePerKey(sum)
                | label + "V" >> beam.Map(lambda kv: kv[1]))
    raise AssertionError(kind)


KINDS = ["map", "stamp", "maptuple", "flatmap", "flatgen", "filter", "fixed", "sliding", "sessions",
         "deadletter", "dofn", "window_param", "counter", "group", "retract"]


def _run(spec: Dict[str, Any], on: bool, directory: str) -> Tuple[Dict[str, list], Dict[str, Any], Any]:
    """Runs the random pipeline with the columnar run on or off: outputs, metrics, error."""
    columnar.COLUMNAR = on
    journal = Journal(os.path.join(directory, f"out-{on}.jsonl"))
    p = beam.Pipeline(options=PipelineOptions(bundle_size=spec["bundle_size"]))
    nodes = [p | "In" >> beam.Create([TimestampedValue(v, t) for v, t in spec["input"]])]
    children = collections.Counter()
    leaves: List[Tuple[str, Any]] = []
    for i, (parent, kind, k) in enumerate(spec["steps"]):
        parent = parent % len(nodes)
        children[parent] += 1
        nodes.append(_apply(nodes[parent], kind, k, f"S{i}", leaves))
    leaves += [(f"N{i}", pc) for i, pc in enumerate(nodes) if not children[i]]
    for name, pc in leaves:
        _ = pc | f"R[{name}]" >> beam.Reshuffle() | f"C[{name}]" >> beam.ParDo(Collect(journal, name))
    error = None
    try:
        result = p.run()
    except PipelineExecutionError as exc:
        return {}, {}, (str(exc), exc.attempts)
    outputs: Dict[str, list] = collections.defaultdict(list)
    for name, *rest in journal.read():
        outputs[name].append(rest)
    q = result.metrics().query()
    metrics = {kind: sorted((str(r.key), repr(r.committed), repr(r.attempted)) for r in q[kind])
               for kind in ("counters", "distributions", "gauges")}
    return dict(outputs), metrics, error


steps_strategy = st.lists(st.tuples(st.integers(0, 50), st.sampled_from(KINDS), st.integers(1, 5)),
                          min_size=1, max_size=7)


_SOME = [(i * 7 % 23, i) for i in range(14)]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(-20, 60), st.integers(0, 40)), min_size=0, max_size=25),
       steps_strategy, st.integers(1, 7))
@example(_SOME, [(0, "retract", 2), (1, "filter", 2), (1, "flatmap", 1), (3, "stamp", 2)], 2)
@example(_SOME, [(0, "group", 3), (1, "fixed", 2), (2, "map", 2), (2, "dofn", 1)], 3)
@example(_SOME, [(0, "sliding", 2), (1, "deadletter", 3), (2, "window_param", 1), (1, "counter", 1),
                 (4, "maptuple", 2), (0, "flatgen", 3), (6, "sessions", 2)], 4)
def test_columnar_and_per_element_runs_agree(values, steps, bundle_size):
    spec = {"input": values, "steps": steps, "bundle_size": bundle_size}
    saved = columnar.COLUMNAR
    with tempfile.TemporaryDirectory() as directory:
        try:
            per_element = _run(spec, False, directory)
            breadth_first = _run(spec, True, directory)
        finally:
            columnar.COLUMNAR = saved
    out_off, metrics_off, error_off = per_element
    out_on, metrics_on, error_on = breadth_first
    assert error_on == error_off
    assert out_on == out_off
    assert metrics_on["distributions"] == metrics_off["distributions"] or any(
        name.endswith(".bad") and rows for name, rows in out_on.items())
    # committed updates are exactly the same; an abandoned columnar run (a dead-letter Map that
    # raised) adds its updates to attempted only
    committed = lambda ms: [(key, c) for key, c, _ in ms]  # noqa: E731
    assert committed(metrics_on["counters"]) == committed(metrics_off["counters"])
    abandoned = any(name.endswith(".bad") and rows for name, rows in out_on.items())
    if not abandoned:
        assert metrics_on == metrics_off


# ---- failures ---------------------------------------------------------------------------------

def _error_and_calls(monkeypatch, on: bool, directory: str, fn_factory, max_attempts: int = 3):
    monkeypatch.setattr(columnar, "COLUMNAR", on)
    journal = Journal(os.path.join(directory, f"calls-{on}.jsonl"))
    once = Once(os.path.join(directory, f"once-{on}"))
    p = beam.Pipeline(options=PipelineOptions(bundle_size=4, max_bundle_attempts=max_attempts))
    out = (p | beam.Create(list(range(10)))
           | "A" >> beam.Map(lambda x: x * 2)
           | "B" >> beam.Map(fn_factory(journal, once))
           | "W" >> beam.WindowInto(FixedWindows(5)))
    _ = out | beam.Reshuffle() | beam.ParDo(Collect(journal, "out"))
    try:
        p.run()
        error = None
    except PipelineExecutionError as exc:
        error = (str(exc), exc.step, exc.element, exc.attempts)
    calls = collections.Counter(e[1] for e in journal.read() if e[0] == "B")
    outs = [e[1:] for e in journal.read() if e[0] == "out"]
    return error, calls, outs


def _always_fails_on_10(journal, once):
    def b(x):
        journal.write("B", x)
        if x == 10:
            raise ValueError("ten")
        return x + 1
    return b


def _fails_once_on_10(journal, once):
    def b(x):
        journal.write("B", x)
        if x == 10 and once.first("ten"):
            raise ValueError("ten, once")
        return x + 1
    return b


def test_an_error_in_the_middle_of_a_columnar_bundle_is_the_per_element_error(monkeypatch, tmp_path):
    off = _error_and_calls(monkeypatch, False, str(tmp_path), _always_fails_on_10)
    on = _error_and_calls(monkeypatch, True, str(tmp_path), _always_fails_on_10)
    assert off[0] is not None and "after 3 attempt(s)" in off[0][0] and off[0][1] == "B"
    assert on[0] == off[0]  # same message, step, element and attempt count
    # the abandoned columnar run called the failing function once more; it is not an attempt
    assert on[1][10] == off[1][10] + 1 == 4


def test_a_flaky_function_is_called_as_often_and_gives_the_same_output(monkeypatch, tmp_path):
    off = _error_and_calls(monkeypatch, False, str(tmp_path), _fails_once_on_10)
    on = _error_and_calls(monkeypatch, True, str(tmp_path), _fails_once_on_10)
    assert off[0] is None and on[0] is None
    assert on[2] == off[2] and len(on[2]) == 10
    assert on[1][10] == off[1][10] == 2  # failed once, then succeeded


def test_a_failing_dead_letter_map_falls_back_for_its_bundle_only(monkeypatch, tmp_path):
    runs: List[str] = []
    real_run = StagePlan.run

    def spy(self, *args):
        try:
            out = real_run(self, *args)
        except Exception as exc:
            runs.append(type(exc).__name__)
            raise
        runs.append("ok")
        return out

    results = {}
    for on in (False, True):
        monkeypatch.setattr(columnar, "COLUMNAR", on)
        monkeypatch.setattr(StagePlan, "run", spy)
        runs.clear()
        journal = Journal(tmp_path / f"dl-{on}.jsonl")
        p = beam.Pipeline(options=PipelineOptions(bundle_size=3))
        good, bad = (p | beam.Create(["1", "2", "x", "4", "5", "6", "7"])
                     | "Parse" >> beam.Map(int).with_exception_handling())
        _ = good | "RG" >> beam.Reshuffle() | "CG" >> beam.ParDo(Collect(journal, "good"))
        _ = (bad | "Why" >> beam.Map(lambda b: (b[0], b[1][0].__name__, b[1].step))
             | "RB" >> beam.Reshuffle() | "CB" >> beam.ParDo(Collect(journal, "bad")))
        result = p.run()
        results[on] = (journal.read(), result.metrics().query()["counters"], list(runs))
    assert results[True][:2] == results[False][:2]
    assert [e[1] for e in results[True][0] if e[0] == "bad"] == ["('x', 'ValueError', 'Parse')"]
    assert results[True][2] == ["ValueError", "ok", "ok"]  # the bundle with "x" fell back
    assert results[False][2] == []


# ---- the stage itself -------------------------------------------------------------------------

def _wrapper(fn, kind):
    return coders.dumps(_CallableWrapperDoFn(fn, kind))


class _Doubler(beam.DoFn):
    def process(self, x, w=beam.DoFn.WindowParam):
        yield x
        yield x


def _stage() -> FusedStage:
    # 1 -> M -> 2 -> F -> 3 (materialised) ; 1 -> D -> 4 -> W -> 5 (materialised) ; 2 -> T -> 6
    steps = [
        StepSpec("M", 1, ((None, 2),), None, _wrapper(lambda x: x + 1, "map")),
        StepSpec("D", 1, ((None, 4),), None, coders.dumps(_Doubler())),
        StepSpec("F", 2, ((None, 3),), None, _wrapper(lambda x: x % 2 == 0, "filter")),
        StepSpec("W", 4, ((None, 5),), FixedWindows(10), None),
        StepSpec("T", 2, ((None, 6),), None,
                 _wrapper(lambda x: [TimestampedValue(x, x)] * (x % 3), "flatmap")),
    ]
    return FusedStage("stage", steps, 1, [3, 5, 6])


def _bundle() -> List[WindowedValue]:
    late = PaneInfo(False, False, PaneInfoTiming.LATE, 2, 1)
    w = (IntervalWindow._of(0, 10_000_000), IntervalWindow._of(5_000_000, 15_000_000))
    return [WindowedValue(i, i * 1_000_000, w if i % 3 else GLOBAL_WINDOWS_TUPLE,
                          late if i % 2 else PaneInfo(True, False, PaneInfoTiming.EARLY, 0, -1),
                          i % 4 == 1)
            for i in range(12)]


def test_a_branching_stage_gives_the_per_element_outputs_in_order(monkeypatch):
    outs = {}
    for on in (False, True):
        monkeypatch.setattr(columnar, "COLUMNAR", on)
        stage = _stage()
        committed, attempted = MetricsContainer(), MetricsContainer()
        outs[on] = stage.process_bundle(_bundle(), None, 3, committed, attempted)
        if on:
            assert stage._plan is not None
            cols = stage.process_columns(Columns.of_elements(_bundle()), None, 3, committed, attempted)
            assert {pc: c.elements() for pc, c in cols.items()} == outs[on]
        stage.teardown()
    assert outs[True] == outs[False]
    assert [len(outs[True][pc]) for pc in (3, 5, 6)] == [6, 40, 12]


def test_a_stage_is_pickled_without_its_plan(monkeypatch):
    monkeypatch.setattr(columnar, "COLUMNAR", True)
    stage = _stage()
    stage.process_bundle(_bundle(), None, 3, MetricsContainer(), MetricsContainer())
    stage.teardown()
    copy = coders.loads(coders.dumps(stage))
    assert copy._plan is not stage._plan
    assert copy.process_bundle(_bundle(), None, 3, MetricsContainer(), MetricsContainer()) == \
        stage.process_bundle(_bundle(), None, 3, MetricsContainer(), MetricsContainer())


def test_columns_keep_panes_and_retractions():
    bundle = _bundle()
    cols = Columns.of_elements(bundle)
    assert cols.panes is not None and cols.retractions is not None
    assert cols.elements() == bundle
    plain = [WindowedValue(i, i, GLOBAL_WINDOWS_TUPLE) for i in range(3)]
    cols = Columns.of_elements(plain)
    assert cols.panes is None and cols.retractions is None
    assert cols.elements() == plain


@pytest.mark.parametrize("result", [TimestampedValue(1, 1), "ab", None, {"a": 1}, (1, 2)])
def test_flatmap_results_are_treated_as_the_per_element_path_does(result):
    cols = Columns([0], [0], [GLOBAL_WINDOWS_TUPLE])
    if isinstance(result, (str, dict)):
        with pytest.raises(columnar.Abandon):
            columnar.flatmap_columns(lambda x: result, cols)
        return
    out = columnar.flatmap_columns(lambda x: result if result is None or isinstance(result, tuple)
                                   else [result], cols)
    if result is None:
        assert out.values == [] and out.ts == []
    elif isinstance(result, tuple):
        assert out.values == [1, 2] and out.ts == [0, 0]
    else:
        assert out.values == [1] and out.ts == [1_000_000]


def test_a_function_with_tagged_outputs_is_called_once_per_element(tmp_path):
    # a function that returns TaggedOutputs would abandon every bundle's columnar run and have
    # its stage run twice: it runs through its ParDoRunner instead, the steps around it too
    journal = Journal(tmp_path / "calls")

    def split(x):
        journal.write(x)
        return beam.pvalue.TaggedOutput("odd", x) if x % 2 else x

    with beam.Pipeline(options=PipelineOptions(["--runner=LocalRunner", "--bundle_size=4"])) as p:
        parts = (p | beam.Create(list(range(20))) | "Double" >> beam.Map(lambda x: x * 2 + x % 3)
                 | "Split" >> beam.Map(split).with_outputs("odd", main="even"))
        assert_that(parts.even, equal_to([v for v in (x * 2 + x % 3 for x in range(20)) if v % 2 == 0]),
                    label="even")
        assert_that(parts.odd, equal_to([v for v in (x * 2 + x % 3 for x in range(20)) if v % 2]),
                    label="odd")
    assert sorted(e[0] for e in journal.read()) == sorted(x * 2 + x % 3 for x in range(20))
