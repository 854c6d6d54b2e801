"""The local runner: the pure-Python reference runner every other runner must agree with.

What it does:
  * splits sources into bundles of `--bundle_size` elements;
  * fuses chains (and trees) of element-wise steps (ParDo, Map, WindowInto, ...) and runs a
    bundle through all of them at once; a ParDo with side inputs starts a new fused stage;
  * retries a failed bundle whole, up to `--max_bundle_attempts`: the attempt's outputs and
    metric updates are discarded and the stage's DoFn instances torn down and rebuilt, so
    fused steps fail together (coupled failure); then fails naming the step and element;
  * groups by deterministic key bytes (`headrace.model.coders.encode_key`) and runs every
    GroupByKey / CombinePerKey through the shared per-key core (`headrace.model.reduce`);
  * gives side inputs Beam's windowed semantics: a main-input element waits until the side
    input's watermark has passed the end of the side window it maps to, without that wait
    changing which elements a downstream grouping finds late (`_StageUnit.run_pending`).

Time:
  * Event time. Every PCollection has a watermark. A bounded source (Create, Read) holds it
    at the start of time until it is exhausted, then releases it to +infinity; a TestStream
    sets it per output as its script says. A step's output watermark is the minimum of its
    input watermarks and its holds (a grouping holds at the earliest timestamp it may still
    output), and never goes back. Elements behind a grouping's input watermark by more than
    the allowed lateness are dropped, counted (`headrace/dropped_late_elements`, and
    `headrace/dropped_closed_window_elements` for windows whose trigger finished) and, with
    `.with_late_data_output(tag)`, sent to a second output.
  * Processing time. With a TestStream in the pipeline the clock is virtual: it starts at 0
    and moves only by `advance_processing_time`. Otherwise it is the system clock. The per-key
    core gets the processing time on every call; keys whose processing-time wakeup is due are
    called back each time the pipeline settles. The runner never sleeps waiting for a
    processing-time deadline: with the system clock, a deadline is honoured only if it passes
    while the pipeline is still running (bounded input ends with the watermark at +infinity,
    which closes every window anyway).
  * TestStream. Its events run one at a time; after each one the whole pipeline settles
    (queues drained, watermarks propagated, due processing-time wakeups fired) before the
    next, so a script gives the same panes on every run. Elements of one add_elements form
    one bundle, whatever `--bundle_size`. After the last event every output's watermark goes
    to +infinity, as in Beam. Several TestStreams in one pipeline take turns, one event each.
  * Triggers. With a trigger that depends only on the watermark (the default trigger,
    AfterWatermark without early/late firings, ...), a grouping buffers elements per key and
    hands them to the core when the watermark next moves (the fast path); with any other
    trigger, each bundle goes to the core at once, so count and processing-time triggers
    fire as data arrives.

What it does not do: run bundles in parallel (it runs one at a time, in one process), read
unbounded sources other than TestStream, wait for wall-clock time to pass, or advance
watermarks heuristically: a watermark moves only when a source says so.
"""

from __future__ import annotations

from typing import Any

from headrace.metrics.metric import MetricResults
from headrace.pipeline.pipeline import Pipeline, PipelineResult, PipelineState
from headrace.runners.local.executor import Executor


class LocalRunner:
    """Runs a pipeline in this process with bundles, fusion, retries and watermarks (see module doc)."""

    def run_pipeline(self, pipeline: Pipeline, options: Any) -> PipelineResult:
        """Executes the pipeline to completion and returns its result."""
        ex = Executor(pipeline, options)
        ex.run()
        return PipelineResult(PipelineState.DONE, MetricResults(ex.committed, ex.attempted))
