"""A TestStream's script a chunk at a time (docs/semantics.md, "A chunk of script events in one
batch"): which islands the streaming runner chunks, and that a long script with processing-time
triggers (Beam's leader_board shape, benchmarks/long_test_stream.py) gives the local runner's
panes in a few micro-batches."""

from __future__ import annotations

import os
import sys

import pytest

import headrace as beam
from headrace.model.time import MAX_TIMESTAMP_MICROS as MAX, MIN_TIMESTAMP_MICROS as MIN
from headrace.options.pipeline_options import PipelineOptions
from headrace.runners.spark.streaming.plan import build_plan
from headrace.testing.test_stream import TestStream
from headrace.testing.util import equal_to
from headrace.transforms import trigger, window
from headrace.transforms.userstate import BagStateSpec
from tests.conftest import RUNNER_CONFIGS, RUNNERS

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _board():
    sys.path.insert(0, REPO)
    from benchmarks import long_test_stream
    return long_test_stream


def _chunked(p):
    """The groupings of `p`'s plan that take script steps a chunk at a time, by label."""
    plan = build_plan(p, 10, 1, 2, (b"a", b"b"))
    labels = {g: spec.label for specs in plan.groupings for g, spec in specs.items()}
    return sorted(labels[g] for g in plan.coordinator.chunked())


class Buffer(beam.DoFn):
    """A stateful DoFn: a bag per key."""

    BAG = BagStateSpec("bag", beam.coders.PickleCoder())

    def process(self, kv, bag=beam.DoFn.StateParam(BAG)):
        bag.add(kv[1])
        yield kv


def _script():
    return (TestStream().add_elements([window.TimestampedValue(("a", 1), 1)])
            .advance_processing_time(30).advance_watermark_to(100).advance_watermark_to_infinity())


def test_first_groupings_before_end_only_ones_take_chunks():
    p = beam.Pipeline()
    _board().build(p, 5, 1, {"team": equal_to([]), "user": equal_to([])})
    assert _chunked(p) == ["TeamSum", "UserSum"]   # the asserts' groupings fire at the end


def test_a_windowed_grouping_after_a_first_one_keeps_the_island_step_by_step():
    p = beam.Pipeline()
    sums = (p | _script()
            | "Early" >> beam.WindowInto(window.FixedWindows(10),
                                         trigger=trigger.AfterWatermark(early=trigger.AfterCount(1)),
                                         accumulation_mode=trigger.AccumulationMode.DISCARDING)
            | "Sum" >> beam.CombinePerKey(sum))
    _ = (sums | "Rekey" >> beam.Map(lambda kv: ("all", kv[1])) | "Again" >> beam.GroupByKey())
    assert _chunked(p) == []
    # the same second grouping in the global window with the default trigger: chunks again
    q = beam.Pipeline(options=PipelineOptions(allow_unsafe_triggers=True))
    sums = (q | _script()
            | "Early" >> beam.WindowInto(window.FixedWindows(10),
                                         trigger=trigger.AfterWatermark(early=trigger.AfterCount(1)),
                                         accumulation_mode=trigger.AccumulationMode.DISCARDING)
            | "Sum" >> beam.CombinePerKey(sum))
    _ = (sums | "Global" >> beam.WindowInto(window.GlobalWindows())
         | "Rekey" >> beam.Map(lambda kv: ("all", kv[1])) | "Again" >> beam.GroupByKey())
    assert _chunked(q) == ["Sum"]


def test_a_side_input_or_a_stateful_step_on_the_script_keeps_it_step_by_step():
    p = beam.Pipeline()
    events = p | _script()
    side = p | "Side" >> beam.Create([1])
    _ = (events | "Windows" >> beam.WindowInto(window.FixedWindows(10))
         | "WithSide" >> beam.Map(lambda kv, s: kv, beam.pvalue.AsList(side))
         | "Sum" >> beam.CombinePerKey(sum))
    assert _chunked(p) == []
    q = beam.Pipeline()
    _ = (q | _script() | "Windows" >> beam.WindowInto(window.FixedWindows(10))
         | "Sum" >> beam.CombinePerKey(sum))
    assert _chunked(q) == ["Sum"]
    r = beam.Pipeline()
    _ = (r | _script() | "Windows" >> beam.WindowInto(window.FixedWindows(10))
         | "Stateful" >> beam.ParDo(Buffer()))
    assert _chunked(r) == []


@pytest.mark.parametrize("runner", [r for r in ("spark-local", "spark-cluster") if r in RUNNERS]
                         or [pytest.param("spark-local", marks=pytest.mark.skip(
                             reason="no Spark runner in HEADRACE_TEST_RUNNERS"))])
def test_a_long_script_with_processing_time_triggers_gives_the_local_runners_panes_in_few_batches(runner):
    board = _board()
    elements = 300   # about 630 events: about as many micro-batches step by step
    want = board.reference(elements, 3)
    assert len(want["team"]) > 50 and len(want["user"]) > 200
    assert {p[3] for p in want["team"]} == {"EARLY", "ON_TIME", "LATE"}
    name, extra = RUNNER_CONFIGS[runner]
    p = beam.Pipeline(options=PipelineOptions(runner=name, **extra))
    board.build(p, elements, 3, {k: equal_to(v) for k, v in want.items()})
    result = p.run()
    result.wait_until_finish()
    batches = [r.committed for r in result.metrics().query()["gauges"]
               if r.key.metric.name == "batches"]
    assert batches and getattr(batches[0], "value", batches[0]) <= 8, batches


def test_a_chunk_gives_each_first_grouping_every_steps_watermark_and_processing_time():
    from headrace.runners.spark.streaming.coordinator import BatchState
    p = beam.Pipeline()
    _ = (p | _script() | "Windows" >> beam.WindowInto(window.FixedWindows(10))
         | "Sum" >> beam.CombinePerKey(sum))
    plan = build_plan(p, 10, 1, 2, (b"a", b"b"))
    c = plan.coordinator
    start = c.initial_offset()
    end = c.next_offset(start, BatchState(c.n_groupings), 0)
    assert end.positions == [5]   # the script's 4 events and its final step, in one batch
    (g, steps), = c.chunk_steps(start, end).items()
    sec = 1_000_000
    assert steps == [
        (0, MIN, 0),                # where the grouping stood before the chunk
        (1, MIN, 0),                # the element event (bundle id 0) at the old watermark
        (2, MIN, 30 * sec),         # processing time +30 s
        (3, 100 * sec, 30 * sec),   # watermark to 100
        (4, MAX, 30 * sec),         # to infinity (the script's last event)
        (5, MAX, 30 * sec),         # the final step
    ]
    assert end.input_watermarks[g] == MAX and end.island_processing_times == [30 * sec]
    # one step per batch when asked
    plan1 = build_plan(p, 10, 1, 2, (b"a", b"b"), chunk_events=1)
    assert plan1.coordinator.chunked() == set()
