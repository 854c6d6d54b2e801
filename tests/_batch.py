"""Runs the Spark streaming tests of each Spark runner configuration as one streaming query.

A TestStream pipeline on the Spark runner is a Structured Streaming query of a few seconds (a
micro-batch per TestStream event); run one by one, the conformance suite's streaming tests
would take about 25 minutes per Spark master. The streaming runner schedules the parts of a
pipeline that share no PCollection ("islands") independently, each with its own watermarks and
processing time, so many tests' pipelines can run as the parts of one query and each still
sees exactly what it would see alone. This module does that, for every test that reaches the
conftest's `_TestRunner` with a streaming pipeline:

1. Before the first test runs (`capture_all`), every Spark test item that builds its
   pipelines with the `make_pipeline` fixture, in a module that mentions TestStream, is run
   once in capture mode: it builds its pipeline as usual, and its first `run()` of a scripted
   streaming pipeline (its unbounded sources are TestStreams) is recorded and stops the test
   (`CaptureStop`); any other pipeline stops it too, without running. Nothing is
   reported for this pass.
2. When a test of a runner first asks for its result (`Batches.result_for`), the captured
   pipelines of that runner with equal options are grafted into one pipeline, each under its
   own label prefix, and run as one query. If it fails and the error names the parts at fault,
   those are taken out (they run alone later) and the rest is run again.
3. Then each test runs for real: its first streaming `run()` gets a view of the shared run
   (state DONE, only its own metrics, with its own step names). What its pipeline wrote (the
   journal, files) is in the test's own `tmp_path`, which is the same directory in both
   passes (conftest's `tmp_path` fixture). Every later `run()` runs alone.

A test whose part was taken out, whose options (but those only read while a pipeline is built,
`BUILD_ONLY_OPTIONS`) are not shared by another test, or whose script is long (`LONG_SCRIPT`),
runs alone.
"""

from __future__ import annotations

import re
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

import pytest
from _pytest.runner import runtestprotocol

from headrace.metrics.metric import MetricResults, MetricsContainer
from headrace.pipeline.pipeline import AppliedPTransform, Pipeline, PipelineResult, PipelineState
from headrace.pipeline.ptransform import PTransform


class CaptureStop(pytest.skip.Exception):
    """Stops a test in capture mode at its first run (a scripted streaming pipeline's is
    recorded first).

    A pytest outcome (as `pytest.skip`; the capture pass reports nothing): `except Exception`
    and `pytest.raises` let it through, and a fixture stopped by it is torn down cleanly."""


# A part whose TestStream scripts have more events than this runs alone: a shared query takes
# as many micro-batches as its longest part, and each costs more the more parts are still busy.
# (Measured on local[2]: with one 58-event part among 45 whose longest had 24, the shared query
# took 69 micro-batches and 163 s; that part alone then took 62 s and the others 84 s.) A script
# the runner performs in chunks (docs/semantics.md, "A chunk of script events in one batch")
# counts as one event.
LONG_SCRIPT = 30


def _script_length(p: Pipeline) -> int:
    from headrace.runners.spark.streaming.plan import build_plan
    from headrace.testing.test_stream import TestStream
    scripts = [n.transform.events for n in p.primitives() if isinstance(n.transform, TestStream)]
    try:
        coordinator = build_plan(p, 10, 1, 2, (b"a", b"b")).coordinator
    except Exception:   # the test's run reports it
        return sum(map(len, scripts))
    chunked = coordinator.chunks
    return sum(1 if chunked.first[chunked.source_island[i]] is not None else len(script)
               for i, script in enumerate(chunked.scripts) if script is not None)


class _Part(PTransform):
    """The composite every captured pipeline is grafted under (label `T<n>`)."""


# Options only read while a pipeline is built (a captured part was built with its own), never
# when it runs: parts that differ only in these share a query. --allow_unsafe_triggers turns a
# construction error into a warning (transforms/core.py, _check_groupable).
BUILD_ONLY_OPTIONS = frozenset({"allow_unsafe_triggers"})


def _options_key(options: Any) -> str:
    """What must be equal for parts to share a query: the options a run reads."""
    return repr(sorted((k, repr(v)) for k, v in options.get_all_options(drop_default=True).items()
                       if k not in BUILD_ONLY_OPTIONS))


def graft(pipelines: List[Tuple[Pipeline, str]], options: Any) -> Pipeline:
    """One pipeline holding each of `pipelines` under its prefix (a composite named so); every
    full label is prefixed, so step names stay unique and metrics say which part they are of,
    and every PCollection is numbered anew.
    The same pipelines can be grafted again (their own labels are kept aside)."""
    merged = Pipeline(runner="SparkRunner", options=options)
    root = merged._root
    for p, prefix in pipelines:
        part = AppliedPTransform(root, _Part(prefix), prefix, ())
        for node in p._root.parts:
            node.parent = part
            part.parts.append(node)
        for node in part.walk():
            if node is not part:
                own = node.__dict__.setdefault("_label_alone", node.full_label)
                node.full_label = f"{prefix}/{own}"
                if node.transform is not None:
                    node.transform.pipeline = merged
            for pc in node.outputs.values():
                pc.pipeline = merged
                pc._id = merged._next_id()   # ids are per pipeline; runners key PCollections by id
            merged._labels.add(node.full_label)
        root.parts.append(part)
    return merged


class PartResult(PipelineResult):
    """A test's view of the shared run: its state, and its own metrics under its own step names."""

    def __init__(self, metrics: Any, prefix: str) -> None:
        super().__init__(PipelineState.DONE)
        committed, attempted = MetricsContainer(), MetricsContainer()
        for mine, theirs in ((committed, metrics._committed), (attempted, metrics._attempted)):
            for (kind, step, ns, name), value in theirs.cells.items():
                if step.startswith(prefix + "/"):
                    mine.cells[(kind, step[len(prefix) + 1:], ns, name)] = value
        self._metrics = MetricResults(committed, attempted)


class Batches:
    """The captured streaming pipelines and the shared runs' results, per runner configuration."""

    def __init__(self) -> None:
        self.capturing: Optional[str] = None            # nodeid of the item being captured
        self.captured: Dict[str, Dict[str, Tuple[Pipeline, Any]]] = {}   # runner -> nodeid -> ...
        self.results: Dict[str, Dict[str, PartResult]] = {}             # runner -> nodeid -> ...
        self.used: set = set()                                          # nodeids served
        self.tmp_paths: Dict[str, Any] = {}     # nodeid -> tmp_path, kept from capture to run
        self.log: List[str] = []                # what the shared runs did (the terminal summary)

    def capture_all(self, items: List[Any]) -> None:
        """Runs each of `items` once in capture mode (nothing is reported). An item that did
        not reach a streaming run gets a fresh `tmp_path` when it runs for real."""
        for item, nextitem in zip(items, items[1:] + [None]):
            self.capturing = item.nodeid
            try:
                runtestprotocol(item, log=False, nextitem=nextitem)
            finally:
                self.capturing = None
                _stop_stray_spark()
            if not any(item.nodeid in c for c in self.captured.values()):
                self.tmp_paths.pop(item.nodeid, None)

    def capture(self, runner: str, pipeline: Pipeline, options: Any) -> None:
        """Records the pipeline of the item being captured and stops it."""
        assert self.capturing is not None
        self.captured.setdefault(runner, {})[self.capturing] = (pipeline, options)
        raise CaptureStop("captured for a shared streaming query")

    def result_for(self, runner: str, nodeid: str) -> Optional[PartResult]:
        """The view of the shared run for this test's first streaming run, or None (run alone)."""
        if nodeid in self.used:
            return None
        self.used.add(nodeid)
        if runner not in self.results:
            self.log.append(f"{runner}: {len(self.captured.get(runner, {}))} streaming tests captured")
            self.results[runner] = self._run_all(self.captured.get(runner, {}))
        return self.results[runner].get(nodeid)

    def _run_all(self, captured: Dict[str, Tuple[Pipeline, Any]]) -> Dict[str, PartResult]:
        # One query per set of options. Grouping by depth as well (every micro-batch runs every
        # level of its query) was measured slower: the queries run one after another, and the
        # micro-batches they add cost more than the levels they save.
        groups: Dict[str, List[str]] = {}
        for nodeid, (p, options) in captured.items():
            if _script_length(p) <= LONG_SCRIPT:
                groups.setdefault(_options_key(options), []).append(nodeid)
        out: Dict[str, PartResult] = {}
        for nodeids in groups.values():
            if len(nodeids) > 1:
                out.update(self._run_group(captured, nodeids))
        return out

    def _run_group(self, captured: Dict[str, Tuple[Pipeline, Any]],
                   nodeids: List[str]) -> Dict[str, PartResult]:
        from headrace.runners import create_runner
        prefixes = {f"T{i}": n for i, n in enumerate(nodeids)}
        while len(prefixes) > 1:
            options = captured[next(iter(prefixes.values()))][1]
            merged = graft([(captured[n][0], pre) for pre, n in prefixes.items()], options)
            start = time.monotonic()
            try:
                result = create_runner("SparkRunner").run_pipeline(merged, options)
                result.wait_until_finish()
            except Exception as exc:  # take out the parts the error names, run the rest again
                named = set(re.findall(r"\b(T\d+)/", str(exc))) & set(prefixes)
                self.log.append(f"{len(prefixes)} tests in one query failed after "
                                f"{time.monotonic() - start:.0f} s; run alone: "
                                f"{[prefixes[p] for p in sorted(named)] or 'all'} "
                                f"({type(exc).__name__}: {str(exc)[:300]})")
                if not named:
                    return {}
                for pre in named:
                    del prefixes[pre]
                continue
            metrics = result.metrics()
            self.log.append(f"{len(prefixes)} tests in one query: {time.monotonic() - start:.0f} s, "
                            f"{_progress(metrics)}")
            return {n: PartResult(metrics, pre) for pre, n in prefixes.items()}
        return {}


def _progress(metrics: Any) -> str:
    """The query's micro-batches and their mean time, from the runner's progress metrics."""
    from headrace.metrics.metric import MetricsFilter
    from headrace.runners.spark.streaming.result import PROGRESS_NAMESPACE
    found = metrics.query(MetricsFilter().with_namespace(PROGRESS_NAMESPACE))
    batches = [r.committed.value for r in found["gauges"] if r.key.metric.name == "batches"]
    times = [r.committed for r in found["distributions"] if r.key.metric.name == "batch_duration_ms"]
    mean = times[0].mean if times else None
    return (f"{batches[0] if batches else '?'} micro-batches, "
            f"{'?' if mean is None else f'{mean:.0f}'} ms each on average (the last 100)")


def _stop_stray_spark() -> None:
    """Stops a SparkContext a test started in capture mode (by asking for the running one
    before any pipeline of it ran): the runner starts the sessions it needs itself."""
    pyspark = sys.modules.get("pyspark")
    if pyspark is not None and pyspark.SparkContext._active_spark_context is not None:
        pyspark.SparkContext._active_spark_context.stop()


BATCHES = Batches()
