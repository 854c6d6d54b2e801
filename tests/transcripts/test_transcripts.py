"""Runs the trigger transcript corpus (tests/transcripts/*.yaml) on headrace.

The format is described in `tests/transcripts/_format.py`. An executor is a function
`transcript -> list of observed steps` (one per input / watermark / processing_time action);
`_format.check` compares the observations with the transcript's expectations, so the same YAML
drives every executor:

* `run_transcript_on_core`: the per-key core (`headrace.model.reduce.ReduceFnRunner`) for one
  key, with a fresh runner and a pickled-and-unpickled `KeyState` at every step, so state kept
  anywhere but in `KeyState` fails the transcript.
* `run_transcript_on_pipeline`: a `beam.Pipeline` from the `make_pipeline` fixture (every runner in
  tests/conftest.py RUNNERS), TestStream -> WindowInto -> GroupByKey / CombinePerKey -> a DoFn
  journaling each pane; a marker after each action attributes panes to steps.
* `benchmarks/trigger_diff.py`: Apache Beam Python's own GeneralTriggerDriver (outside CI).
"""

from __future__ import annotations

import pickle
from typing import Any, Dict, List, Optional

import pytest

import headrace as beam
from headrace.metrics.metric import MetricsFilter
from headrace.model.combine import SumCombineFn
from headrace.model.reduce import Element, KeyState, Pane, ReduceFnRunner
from headrace.model.time import (
    END_OF_GLOBAL_WINDOW_MICROS, MAX_TIMESTAMP_MICROS, MIN_TIMESTAMP_MICROS, Duration, Timestamp,
)
from headrace.model.window import (
    GLOBAL_WINDOWS_TUPLE, FixedWindows, GlobalWindow, GlobalWindows, Sessions, SlidingWindows,
)
from headrace.model.strategy import TimestampCombiner, Windowing
from headrace.model.windowed import TimestampedValue
from headrace.testing.test_stream import TestStream
from headrace.transforms import trigger as trigger_module
from tests._support import Journal
from tests.transcripts import _format

CORPUS = _format.load_corpus()

WINDOW_FNS = {"FixedWindows": FixedWindows, "SlidingWindows": SlidingWindows,
              "Sessions": Sessions, "GlobalWindows": GlobalWindows}
TRIGGERS: Dict[str, Any] = {
    name: getattr(trigger_module, name) for name in trigger_module.__all__
    if isinstance(getattr(trigger_module, name), type)
    and issubclass(getattr(trigger_module, name), trigger_module.TriggerFn)
    and name not in ("TriggerFn", "LeafTrigger")
}
TRIGGERS["Default"] = trigger_module.DefaultTrigger


# ---- building headrace objects from a transcript ------------------------------------------


def micros(t: Any) -> int:
    """A transcript time (seconds, or .inf for the end of time) in integer microseconds."""
    if _format.is_end_of_time(t):
        return MAX_TIMESTAMP_MICROS
    return int(round(_format.seconds(t) * 1_000_000))


def windowing_of(spec: Dict[str, Any]) -> Windowing:
    """The transcript's windowing strategy, built fresh (triggers and WindowFns are parsed)."""
    return Windowing(
        _format.parse_expr(spec["window_fn"], WINDOW_FNS),
        _format.parse_expr(spec["trigger_fn"], TRIGGERS),
        getattr(trigger_module.AccumulationMode, spec["accumulation_mode"].upper()),
        getattr(TimestampCombiner, spec.get("timestamp_combiner", "OUTPUT_AT_EOW")),
        spec["allowed_lateness"],
        getattr(trigger_module.ClosingBehavior, spec.get("closing_behavior", "FIRE_IF_NON_EMPTY")),
        getattr(trigger_module.OnTimeBehavior, spec.get("on_time_behavior", "FIRE_ALWAYS")),
    )


def combine_fn_of(spec: Dict[str, Any]) -> Optional[SumCombineFn]:
    """SumCombineFn for `combine_fn: sum`, else None (GroupByKey)."""
    return SumCombineFn() if spec.get("combine_fn") == "sum" else None


def window_repr(w: Any) -> Any:
    """[start, max_timestamp] in whole seconds, or 'global'."""
    if isinstance(w, GlobalWindow):
        return _format.GLOBAL
    return [w.start_us // 1_000_000, (w.end_us - 1) // 1_000_000]


def timestamp_repr(ts_us: int) -> Any:
    """Whole seconds, or 'end_of_global_window'."""
    if ts_us == END_OF_GLOBAL_WINDOW_MICROS:
        return _format.END_OF_GLOBAL_WINDOW
    return ts_us // 1_000_000


def pane_repr(p: Pane, combined: bool) -> Dict[str, Any]:
    """A core pane in the transcript's normal form."""
    info = p.pane_info
    return _format.pane(window_repr(p.window), p.value, timestamp_repr(p.timestamp_us),
                        info.timing.name, info.index, info.nonspeculative_index, info.is_first,
                        info.is_last, retraction=p.is_retraction, combined=combined)


# ---- executor: the per-key core -----------------------------------------------------------


def run_transcript_on_core(spec: Dict[str, Any]) -> List[_format.ObservedStep]:
    """Runs `spec` on ReduceFnRunner for one key; returns one observed step per action."""
    combined = "combine_fn" in spec
    blob = pickle.dumps(KeyState())
    wm, pt = MIN_TIMESTAMP_MICROS, 0
    observed: List[_format.ObservedStep] = []
    for step in spec["transcript"]:
        (kind, arg), = step.items()
        if kind not in _format.ACTIONS:
            continue
        windowing = windowing_of(spec)
        runner = ReduceFnRunner(windowing, combine_fn_of(spec))
        state = pickle.loads(blob)
        if kind == "input":
            items = []
            for value, t in _format.input_elements(arg):
                ts = micros(t)
                for w in windowing.windowfn._assign(value, ts, GLOBAL_WINDOWS_TUPLE):
                    items.append(Element(value, ts, w))
            result = runner.process_elements(state, items, wm, pt)
        elif kind == "watermark":
            new_wm = micros(arg)
            assert new_wm >= wm, f"{spec['name']}: the watermark may not move back ({arg})"
            wm = new_wm
            result = runner.on_watermark(state, wm, pt)
        else:
            new_pt = micros(arg)
            assert new_pt >= pt, f"{spec['name']}: processing time may not move back ({arg})"
            pt = new_pt
            result = runner.on_processing_time(state, pt, wm)
        blob = pickle.dumps(state)
        observed.append({
            "panes": [pane_repr(p, combined) for p in result.panes],
            "raw_panes": result.panes,
            "dropped": {"late": len(result.dropped_late), "closed": len(result.dropped_closed)},
            "state": {"active": sorted(window_repr(w) for w in state.windows),
                      "closed": sorted(window_repr(w) for w in state.closed)},
            "is_empty": state.is_empty(),
        })
    return observed


def _params(corpus: List[Dict[str, Any]]) -> List[Any]:
    out = []
    for spec in corpus:
        marks = [pytest.mark.xfail(strict=True, reason=spec["xfail"])] if "xfail" in spec else []
        out.append(pytest.param(spec, id=spec["name"], marks=marks))
    return out


@pytest.mark.parametrize("spec", _params(CORPUS))
def test_transcript_on_core(spec: Dict[str, Any]) -> None:
    observed = run_transcript_on_core(spec)
    _format.check_or_fail(spec, observed)
    for step in observed:
        # `state: empty` means the key can be forgotten, which KeyState.is_empty() must agree with.
        assert step["is_empty"] == (step["state"] == {"active": [], "closed": []})
        _check_retractions_first(spec, step["raw_panes"])


def _check_retractions_first(spec: Dict[str, Any], panes: List[Pane]) -> None:
    """In one step, a window's retractions come before its new pane."""
    seen_new = set()
    for p in panes:
        if p.is_retraction:
            assert p.window not in seen_new, (
                f"{spec['name']}: retraction of {p.window} emitted after the window's new pane")
        else:
            seen_new.add(p.window)


# ---- executor: a pipeline on the runner under test -----------------------------------------


class _RecordPanes(beam.DoFn):
    """Writes each pane it sees (window, value, timestamp, pane info, retraction) to the journal."""

    def __init__(self, journal: Journal, combined: bool) -> None:
        self.journal = journal
        self.combined = combined

    def process(self, kv, window=beam.DoFn.WindowParam, timestamp=beam.DoFn.TimestampParam,
                pane=beam.DoFn.PaneInfoParam, is_retraction=beam.DoFn.RetractionParam):
        _key, value = kv
        self.journal.write("pane", _format.pane(
            window_repr(window), value if self.combined else list(value),
            timestamp_repr(timestamp.micros), pane.timing.name, pane.index,
            pane.nonspeculative_index, pane.is_first, pane.is_last,
            retraction=bool(is_retraction), combined=self.combined))
        return []


class _RecordStep(beam.DoFn):
    """Writes a step marker: every pane journaled before it belongs to that step or an earlier one."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal

    def process(self, n):
        self.journal.write("step", n)
        return []


def script_of(spec: Dict[str, Any]) -> TestStream:
    """The transcript as a TestStream: actions on output "data", a marker on "steps" after each."""
    stream = TestStream()
    wm, pt, n = MIN_TIMESTAMP_MICROS, 0, 0
    for step in spec["transcript"]:
        (kind, arg), = step.items()
        if kind not in _format.ACTIONS:
            continue
        if kind == "input":
            stream.add_elements([TimestampedValue(("k", v), Timestamp(micros=micros(t)))
                                 for v, t in _format.input_elements(arg)], tag="data")
        elif kind == "watermark" and micros(arg) > wm:
            wm = micros(arg)
            stream.advance_watermark_to(Timestamp(micros=wm), tag="data")
        elif kind == "processing_time" and micros(arg) > pt:
            stream.advance_processing_time(Duration(micros=micros(arg) - pt))
            pt = micros(arg)
        stream.add_elements([TimestampedValue(n, 0)], tag="steps")
        n += 1
    return stream


def add_transcript(p: Any, spec: Dict[str, Any], journal: Journal, prefix: str = "") -> None:
    """Adds `spec` to pipeline `p` as TestStream | WindowInto | GroupByKey (or CombinePerKey)
    | a DoFn journaling each pane, with a marker after each action; labels start with `prefix`."""
    w = windowing_of(spec)
    combined = "combine_fn" in spec
    outs = p | f"{prefix}Script" >> script_of(spec)
    windowed = outs["data"] | f"{prefix}Window" >> beam.WindowInto(
        w.windowfn, trigger=w.trigger, accumulation_mode=w.accumulation_mode,
        timestamp_combiner=w.timestamp_combiner,
        allowed_lateness=Duration(micros=w.allowed_lateness_us),
        closing_behavior=w.closing_behavior, on_time_behavior=w.on_time_behavior)
    grouped = windowed | (f"{prefix}Group" >> (beam.CombinePerKey(SumCombineFn()) if combined
                                                else beam.GroupByKey()))
    grouped | f"{prefix}Panes" >> beam.ParDo(_RecordPanes(journal, combined))
    outs["steps"] | f"{prefix}Steps" >> beam.ParDo(_RecordStep(journal))


def observe(journal: Journal, metrics: Any, prefix: str = "") -> List[_format.ObservedStep]:
    """One observed step per action of a transcript added with `add_transcript`: the panes
    journaled between its marker and the previous one. Drops and state are not observed per
    step (None); the drop counters of its grouping in `metrics` (the run's `metrics()`) are the
    last step's `total_dropped`. Output
    after the last action (the stream's final move to the end of time) is ignored, as the
    transcript says nothing about it."""
    observed: List[_format.ObservedStep] = []
    panes: List[Dict[str, Any]] = []
    every: List[Dict[str, Any]] = []
    for kind, payload in journal.read():
        if kind == "pane":
            panes.append(payload)
            every.append(payload)
        else:
            assert payload == len(observed), f"step markers out of order: {payload}"
            observed.append({"panes": panes, "dropped": None, "state": None})
            panes = []
    dropped = {}
    for name, key in (("dropped_late_elements", "late"), ("dropped_closed_window_elements", "closed")):
        query = MetricsFilter().with_namespace("headrace").with_name(name)
        if prefix:
            query = query.with_step(f"{prefix}Group")
        found = metrics.query(query)
        dropped[key] = sum(r.committed for r in found["counters"])
    if observed:
        observed[-1]["total_dropped"] = dropped
        observed[-1]["all_panes"] = sorted(every, key=repr)   # with the final step's
    return observed


def run_transcript_on_pipeline(spec: Dict[str, Any], make_pipeline: Any,
                               journal: Journal) -> List[_format.ObservedStep]:
    """Runs `spec` alone as a pipeline on the runner under test (`add_transcript`, `observe`)."""
    p = make_pipeline()
    add_transcript(p, spec, journal)
    result = p.run()
    result.wait_until_finish()
    return observe(journal, result.metrics())


def _pipeline_eligible(spec: Dict[str, Any]) -> bool:
    w = windowing_of(spec)
    return not (isinstance(w.windowfn, GlobalWindows)
                and isinstance(w.trigger, trigger_module.DefaultTrigger))


# On the Spark runners a transcript's pipeline is a streaming query of a few seconds; all the
# corpus's transcripts run instead as independent parts of one pipeline per runner (one query,
# as many micro-batches as the longest transcript needs: the streaming runner schedules the
# parts independently, each with its own watermarks and processing time), and each test
# checks its part. The local runner runs each transcript alone.
_BATCHED: Dict[Any, Any] = {}


@pytest.fixture(scope="module")
def batched_transcripts(tmp_path_factory):
    """{runner: {transcript name: observed steps}} for the Spark runners, built on first use."""
    from tests.conftest import RUNNER_CONFIGS, _TestRunner
    from headrace.options.pipeline_options import PipelineOptions

    def get(runner: str, chunked: bool = False) -> Dict[str, Any]:
        """Step by step (one script event per micro-batch, so that the journal's order tells
        each step's panes), or, `chunked`, as the runner runs a script by default: every pane
        journaled (sorted) per transcript."""
        which = (runner, chunked)
        if which not in _BATCHED:
            name, extra = RUNNER_CONFIGS[runner]
            events = {} if chunked else {"test_stream_events_per_batch": 1}
            p = beam.Pipeline(runner=_TestRunner(name, "tests/transcripts/batched"),
                              options=PipelineOptions(**extra, **events))
            root = tmp_path_factory.mktemp(f"transcripts-{runner}")
            parts = []
            for i, spec in enumerate(s for s in CORPUS if _pipeline_eligible(s)):
                journal = Journal(root / f"{i}.jsonl")
                prefix = f"T{i}:"
                add_transcript(p, spec, journal, prefix)
                parts.append((spec["name"], journal, prefix))
            try:
                result = p.run()
                result.wait_until_finish()
                if chunked:
                    _BATCHED[which] = {n: sorted((pl for kind, pl in j.read() if kind == "pane"),
                                                 key=repr) for n, j, _ in parts}
                else:
                    metrics = result.metrics()
                    _BATCHED[which] = {n: observe(j, metrics, pre) for n, j, pre in parts}
            except Exception as exc:  # every test of this runner reports it
                _BATCHED[which] = exc
        got = _BATCHED[which]
        if isinstance(got, Exception):
            raise got
        return got
    return get


@pytest.mark.parametrize("spec", _params(CORPUS))
def test_transcript_on_pipeline(spec: Dict[str, Any], make_pipeline: Any, journal: Journal,
                                runner: str, batched_transcripts: Any) -> None:
    if not _pipeline_eligible(spec):
        pytest.skip("a pipeline may not group an unbounded PCollection in the global window with "
                    "the default trigger (as in Beam); the core runs this transcript")
    if runner.startswith("spark"):
        observed = batched_transcripts(runner)[spec["name"]]
        # the same script a chunk at a time (a few micro-batches): the same panes, which its
        # journal's order cannot attribute to steps (docs/semantics.md)
        chunked = batched_transcripts(runner, chunked=True)[spec["name"]]
        assert chunked == observed[-1]["all_panes"], f"{spec['name']}: panes in chunks"
    else:
        observed = run_transcript_on_pipeline(spec, make_pipeline, journal)
    _format.check_or_fail(spec, observed)
    want = {"late": 0, "closed": 0}
    for step in spec["transcript"]:
        if "dropped" in step:
            want = {k: want[k] + step["dropped"][k] for k in want}
    assert observed[-1]["total_dropped"] == want, f"{spec['name']}: dropped elements"


# ---- the corpus itself --------------------------------------------------------------------

REQUIRED_TRIGGERS = (
    "AfterWatermark", "AfterCount", "AfterProcessingTime", "AfterAny", "AfterAll", "AfterEach",
    "Repeatedly", "OrFinally", "Always", "Never", "DefaultTrigger", "ElemCount", "EndOfWindow",
    "SinceEarliestElem", "AtPeriod", "Done", "SequenceOf", "RepeatUntil",
)


def test_corpus_covers_the_model() -> None:
    assert len(CORPUS) >= 50
    used = set()
    for spec in CORPUS:
        used.update(_format.expr_names(spec["trigger_fn"]))
        used.update(_format.expr_names(spec["window_fn"]))
    missing = set(REQUIRED_TRIGGERS) | set(WINDOW_FNS)
    assert missing - used == set()
    modes = {spec["accumulation_mode"].upper() for spec in CORPUS}
    assert modes == set(_format.ACCUMULATION_MODES)
    combiners = {spec.get("timestamp_combiner", "OUTPUT_AT_EOW") for spec in CORPUS}
    assert combiners == set(_format.TIMESTAMP_COMBINERS)
    deviations = {d for spec in CORPUS for d in _format.deviations(spec)}
    assert deviations == set(range(1, _format.BEAM_DEVIATIONS + 1)) - set(_format.WITHDRAWN_DEVIATIONS)


def test_checker_rejects_wrong_and_missing_output() -> None:
    pane = {"window": [0, 9], "values": [1, 2], "timestamp": 9, "timing": "ON_TIME", "index": 0,
            "nonspeculative_index": 0, "is_first": True, "is_last": True}
    steps: List[Dict[str, Any]] = [{"input": [1, 2]}, {"watermark": 10}]
    spec: Dict[str, Any] = {"name": "t", "window_fn": "FixedWindows(10)", "trigger_fn": "Default",
                            "accumulation_mode": "discarding", "allowed_lateness": 0,
                            "transcript": steps + [{"expect": [pane]}]}
    _format.validate(spec)
    assert _format.check(spec, run_transcript_on_core(spec)) == []
    wrong = dict(spec, transcript=steps + [{"expect": [dict(pane, values=[1])]}])
    assert any("expected pane not produced" in e for e in _format.check(wrong, run_transcript_on_core(wrong)))
    missing = dict(spec, transcript=steps)
    assert any("unexpected output" in e for e in _format.check(missing, run_transcript_on_core(missing)))


def test_expression_parser_is_safe() -> None:
    with pytest.raises(_format.TranscriptError):
        _format.parse_expr("__import__('os').system('true')", TRIGGERS)
    with pytest.raises(_format.TranscriptError):
        _format.parse_expr("AfterCount(2).__class__", TRIGGERS)
    with pytest.raises(_format.TranscriptError):
        _format.parse_expr("Eval(1)", TRIGGERS)
    t = _format.parse_expr("AfterWatermark(early=AfterCount(2), late=Default)", TRIGGERS)
    assert t == trigger_module.AfterWatermark(early=trigger_module.AfterCount(2),
                                              late=trigger_module.DefaultTrigger())


def test_semantics_doc_cites_existing_transcripts() -> None:
    """docs/semantics.md backs its rules with transcript names in brackets: they must exist."""
    import os
    import re

    path = os.path.join(os.path.dirname(_format.HERE), os.pardir, "docs", "semantics.md")
    text = open(path, encoding="utf-8").read()
    cited = set()
    for group in re.findall(r"\[([a-z0-9_,\s]+)\]", text):
        items = [n.strip() for n in group.split(",")]
        if all(re.fullmatch(r"[a-z][a-z0-9]*(_[a-z0-9]+)+", n) for n in items):
            cited.update(items)
    names = {spec["name"] for spec in CORPUS}
    assert len(cited) >= 40 and cited - names == set()
    for n in range(1, _format.BEAM_DEVIATIONS + 1):
        assert re.search(rf"^\s*{n}\. \*\*", text, re.M), f"deviation {n} is not documented"
