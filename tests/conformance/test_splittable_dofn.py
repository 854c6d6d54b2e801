"""Splittable DoFn (Beam's SDF API) on every runner: offset ranges, self-checkpoints with a resume
delay, an unbounded-per-element read whose manual watermark estimator holds downstream windows,
bundle finalizers, runner-initiated splits, and the errors that name the step and the element.

Expected outputs are computed from the inputs in the tests (every position exactly once).
"""

from __future__ import annotations

import pytest

import headrace as beam
from headrace.errors import HeadraceError, PipelineConstructionError
from headrace.io.restriction_trackers import (
    OFFSET_INFINITY, GrowableOffsetRangeTracker, OffsetRange, OffsetRestrictionTracker,
)
from headrace.io.watermark_estimators import ManualWatermarkEstimator
from headrace.testing import TestStream
from headrace.testing.util import assert_that, equal_to
from headrace.transforms import window
from headrace.io.iobase import WatermarkEstimator
from headrace.transforms.core import RestrictionProvider, WatermarkEstimatorProvider
from headrace.utils.timestamp import Duration, Timestamp
from tests._support import counter_value

US = 1_000_000


#: The tests whose pipelines are unbounded, so run on the Spark *streaming* runner.


class RangeProvider(RestrictionProvider):
    """Element n: the positions [0, n), split into parts of `part` positions."""

    def __init__(self, part=1000):
        self.part = part

    def initial_restriction(self, element):
        return OffsetRange(0, element)

    def create_tracker(self, restriction):
        return OffsetRestrictionTracker(restriction)

    def split(self, element, restriction):
        return restriction.split(self.part)

    def restriction_size(self, element, restriction):
        return restriction.size()


class EmitPositions(beam.DoFn):
    """Outputs (element, position) for every position of the element's range (parts of 3)."""

    def process(self, element, tracker=beam.DoFn.RestrictionParam(RangeProvider(3))):
        pos = tracker.current_restriction().start
        while tracker.try_claim(pos):
            yield element, pos
            pos += 1


def every_position(ns):
    return sorted((n, i) for n in ns for i in range(n))


def test_sdf_reads_offset_ranges(make_pipeline):
    ns = [0, 1, 7, 25]
    with make_pipeline(bundle_size=4) as p:
        out = p | beam.Create(ns) | beam.ParDo(EmitPositions())
        assert_that(out, equal_to(every_position(ns)))
        # a second reader of the output: it is read twice, the SDF runs once
        count = out | beam.combiners.Count.Globally()
        assert_that(count, equal_to([len(every_position(ns))]), label="count")


class OwnProvider(beam.DoFn, RestrictionProvider):
    """A DoFn that is its own RestrictionProvider (`DoFn.RestrictionParam()` with no argument)."""

    def initial_restriction(self, element):
        return OffsetRange(10, 10 + len(element))

    def create_tracker(self, restriction):
        return OffsetRestrictionTracker(restriction)

    def restriction_size(self, element, restriction):
        return restriction.size()

    def split(self, element, restriction):
        return restriction.split(2)

    def process(self, element, tracker=beam.DoFn.RestrictionParam()):
        r = tracker.current_restriction()
        for pos in range(r.start, r.stop):
            if not tracker.try_claim(pos):
                return
            yield element[pos - 10]


def test_sdf_that_is_its_own_restriction_provider(make_pipeline):
    words = ["splittable", "dofn", ""]
    with make_pipeline() as p:
        out = p | beam.Create(words) | beam.ParDo(OwnProvider())
        assert_that(out, equal_to([c for w in words for c in w]))


class CheckpointEvery(beam.DoFn):
    """Claims `k` positions per call, then checkpoints with `defer_remainder(delay)`; outputs
    (element, position, processing time of the call in seconds)."""

    def __init__(self, k, delay):
        self.k = k
        self.delay = delay

    def process(self, element, tracker=beam.DoFn.RestrictionParam(RangeProvider())):
        now = Timestamp.now().micros / US
        pos = tracker.current_restriction().start
        for _ in range(self.k):
            if not tracker.try_claim(pos):
                return
            yield element, pos, now
            pos += 1
        tracker.defer_remainder(Duration(seconds=self.delay))


def _check_resumes(rows, ns, k, delay):
    assert sorted((e, pos) for e, pos, _ in rows) == every_position(ns)
    for n in ns:
        times = [t for pos, t in sorted((pos, t) for e, pos, t in rows if e == n)]
        calls = [times[i] for i in range(0, len(times), k)]  # one processing time per call
        assert all(b - a >= delay - 1e-6 for a, b in zip(calls, calls[1:])), calls


def test_sdf_self_checkpoint_resumes_after_the_delay(make_pipeline):
    ns, k, delay = [5, 4], 2, 0.2
    rows = []
    with make_pipeline() as p:
        out = p | beam.Create(ns) | beam.ParDo(CheckpointEvery(k, delay))
        assert_that(out, lambda got: rows.extend(got) or _check_resumes(got, ns, k, delay))


def test_sdf_self_checkpoint_resumes_on_a_test_streams_clock(make_pipeline):
    ns, k, delay = [5], 2, 30.0  # 30 s of the TestStream's virtual clock: no real wait
    stream = (TestStream().advance_watermark_to(0).add_elements(ns)
              .advance_processing_time(1).advance_watermark_to_infinity())
    with make_pipeline() as p:
        out = p | stream | beam.ParDo(CheckpointEvery(k, delay))
        assert_that(out, lambda got: _check_resumes(got, ns, k, delay))


# ---- an unbounded read per element with a manual watermark estimator ----------------

#: The queue the SDF reads: (event time in seconds) per position, out of order within bounds.
QUEUE = [1, 2, 3, 12, 13, 14, 5, 6, 16, 25]


class GrowingRange(RangeProvider):
    """[0, infinity) over QUEUE, whose end is estimated as its length."""

    def initial_restriction(self, element):
        return OffsetRange(0, OFFSET_INFINITY)

    def create_tracker(self, restriction):
        return GrowableOffsetRangeTracker(restriction, lambda: len(QUEUE))

    def split(self, element, restriction):
        yield restriction

    def restriction_size(self, element, restriction):
        return 1.0


class ReadQueue(beam.DoFn):
    """Reads QUEUE through a growable tracker, three records per call, setting the watermark to
    the earliest event time still unread (a correct watermark), then checkpointing; claims the
    end once the queue is read. Journals each claim."""

    def __init__(self, journal):
        self.journal = journal

    @beam.DoFn.unbounded_per_element()
    def process(self, element,
                tracker=beam.DoFn.RestrictionParam(GrowingRange()),
                estimator=beam.DoFn.WatermarkEstimatorParam(
                    ManualWatermarkEstimator.default_provider())):
        pos = tracker.current_restriction().start
        for _ in range(3):
            if pos >= len(QUEUE):
                tracker.try_claim(OFFSET_INFINITY)  # the end: the claim fails, the read is done
                return
            if not tracker.try_claim(pos):
                return
            self.journal.write("claim", pos)
            yield beam.TimestampedValue(("k", QUEUE[pos]), QUEUE[pos])
            pos += 1
        rest = QUEUE[pos:]
        estimator.set_watermark(Timestamp(min(rest)) if rest else Timestamp(max(QUEUE) + 1))
        tracker.defer_remainder()


class JournalPane(beam.DoFn):
    def __init__(self, journal):
        self.journal = journal

    def process(self, kv, w=beam.DoFn.WindowParam, pane=beam.DoFn.PaneInfoParam):
        self.journal.write("pane", int(w.start), sorted(kv[1]), pane.timing.name)
        yield int(w.start), sorted(kv[1]), pane.timing.name


def test_unbounded_per_element_sdf_holds_windows_until_its_estimator_allows(make_pipeline, journal,
                                                                            runner):
    expected = {}
    for t in QUEUE:
        expected.setdefault(t // 10 * 10, []).append(t)
    with make_pipeline() as p:
        out = (p | beam.Create(["queue"]) | beam.ParDo(ReadQueue(journal))
               | beam.WindowInto(window.FixedWindows(10)) | beam.GroupByKey()
               | beam.ParDo(JournalPane(journal)))
        assert_that(out, equal_to([(s, sorted(v), "ON_TIME") for s, v in expected.items()]))
    if runner == "LocalRunner":  # one process: the journal's order is the order of events
        events = journal.read()
        first_window_fired = events.index(["pane", 0, expected[0], "ON_TIME"])
        claims = [e[1] for e in events[:first_window_fired] if e[0] == "claim"]
        # [0, 10) may close once position 7 (time 6) is read, and must before the last claim
        assert 7 in claims and 9 not in claims, events


# ---- bundle finalizers --------------------------------------------------------------


class FinalizeClaims(beam.DoFn):
    """Registers, per bundle, a finalizer journaling the positions the bundle claimed; fails the
    first attempt of the bundle holding element 6 after claiming."""

    def __init__(self, journal, fail_dir):
        self.journal = journal
        self.fail_dir = fail_dir

    def process(self, element, tracker=beam.DoFn.RestrictionParam(RangeProvider(100)),
                finalizer=beam.DoFn.BundleFinalizerParam):
        import os
        claimed = []
        pos = tracker.current_restriction().start
        while tracker.try_claim(pos):
            claimed.append([element, pos])
            beam.Metrics.counter("sdf", "claimed").inc()
            yield element, pos
            pos += 1
        journal = self.journal
        finalizer.register(lambda: journal.write("finalized", claimed))
        marker = os.path.join(self.fail_dir, f"failed-{element}")
        if element == 6 and not os.path.exists(marker):
            open(marker, "w").close()
            raise RuntimeError("the first attempt fails after claiming")


def test_sdf_bundle_finalizers_run_after_commit_and_not_for_a_failed_attempt(make_pipeline, journal,
                                                                               tmp_path):
    ns = [3, 6, 2]
    p = make_pipeline()
    out = p | beam.Create(ns) | beam.ParDo(FinalizeClaims(journal, str(tmp_path)))
    assert_that(out, equal_to(every_position(ns)))
    result = p.run()
    finalized = [tuple(x) for e in journal.read() if e[0] == "finalized" for x in e[1]]
    assert sorted(finalized) == every_position(ns)  # each once: the failed attempt's never ran
    # committed metrics count each claim once; attempted ones include the failed attempt's
    assert counter_value(result, "claimed") == sum(ns)
    assert counter_value(result, "claimed", attempted=True) >= sum(ns) + 6


class CountingEstimator(WatermarkEstimator):
    """An estimator whose state is a list it appends to, in place, per output it observes."""

    def __init__(self, state):
        self.state = state

    def observe_timestamp(self, timestamp):
        self.state.append(1)

    def current_watermark(self):
        return None

    def get_estimator_state(self):
        return self.state


class CountingEstimatorProvider(WatermarkEstimatorProvider):
    def initial_estimator_state(self, element, restriction):
        return []

    def create_watermark_estimator(self, state):
        return CountingEstimator(state)


class CheckpointEveryClaim(beam.DoFn):
    """Claims one position per call and checkpoints; outputs (element, position, outputs its
    estimator observed before); the first attempt of position 2 fails after its output."""

    def __init__(self, fail_dir):
        self.fail_dir = fail_dir

    def process(self, element, tracker=beam.DoFn.RestrictionParam(RangeProvider(100)),
                estimator=beam.DoFn.WatermarkEstimatorParam(CountingEstimatorProvider())):
        import os
        pos = tracker.current_restriction().start
        if not tracker.try_claim(pos):
            return
        yield element, pos, len(estimator.get_estimator_state())
        marker = os.path.join(self.fail_dir, f"failed-{element}")
        if pos == 2 and not os.path.exists(marker):
            open(marker, "w").close()
            raise RuntimeError("the first attempt fails after its output")
        tracker.defer_remainder()


def test_a_retried_bundle_gets_the_estimator_state_of_its_work_not_a_changed_one(make_pipeline,
                                                                                tmp_path):
    """An estimator that changes its state in place: the retry of a failed bundle starts from the
    state the work had, so every position sees the count of the outputs before it."""
    ns = [4, 3]
    with make_pipeline() as p:
        out = p | beam.Create(ns) | beam.ParDo(CheckpointEveryClaim(str(tmp_path)))
        assert_that(out, equal_to([(n, i, i) for n in ns for i in range(n)]))


# ---- runner-initiated splits ----------------------------------------------------------


class JournalRestrictions(beam.DoFn):
    """Outputs every position, journaling the restriction each call starts with."""

    def __init__(self, journal):
        self.journal = journal

    def process(self, element, tracker=beam.DoFn.RestrictionParam(RangeProvider(10_000))):
        r = tracker.current_restriction()
        self.journal.write("call", element, r.start, r.stop)
        pos = r.start
        while tracker.try_claim(pos):
            yield element, pos
            pos += 1


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_local_runner_splits_restrictions_at_random_points(seed, journal, tmp_path):
    ns = [50, 120]
    opts = beam.PipelineOptions(sdf_test_split_probability=0.2, sdf_test_split_seed=seed)
    with beam.Pipeline(runner="LocalRunner", options=opts) as p:
        out = p | beam.Create(ns) | beam.ParDo(JournalRestrictions(journal))
        assert_that(out, equal_to(every_position(ns)))
    calls = [e for e in journal.read() if e[0] == "call"]
    assert len(calls) > len(ns)  # the runner split restrictions, and the residuals were read


class SlowPositions(JournalRestrictions):
    """JournalRestrictions reading each position in `seconds` (a slow file)."""

    def __init__(self, journal, seconds):
        super().__init__(journal)
        self.seconds = seconds

    def process(self, element, tracker=beam.DoFn.RestrictionParam(RangeProvider(10_000))):
        import time
        for out in super().process(element, tracker):
            time.sleep(self.seconds)
            yield out


@pytest.mark.parametrize("straggler", [True, False])
def test_spark_batch_splits_a_straggling_restriction(make_pipeline, runner, journal, straggler):
    if not runner.startswith("spark"):
        pytest.skip("straggler splitting is the Spark batch runner's")
    ns = [500, 5, 5, 5]  # one element of 2 s (no initial split) and three of milliseconds
    with make_pipeline(sdf_straggler_splitting=straggler) as p:
        out = p | beam.Create(ns) | beam.ParDo(SlowPositions(journal, 0.004))
        assert_that(out, equal_to(every_position(ns)))
    calls = [e[1:] for e in journal.read() if e[0] == "call"]
    big = sorted((start, stop) for n, start, stop in calls if n == ns[0])
    if not straggler:
        assert len(calls) == len(ns), calls
        return
    # the big one was checkpointed (its first call started with all of it), and its rest cut
    # into parts, read in a later wave, that follow each other up to the end
    assert len(big) >= 3 and big[0] == (0, ns[0]), big
    rest = big[1:]
    assert 0 < rest[0][0] and rest[-1][1] == ns[0], big
    assert all(a[1] == b[0] for a, b in zip(rest, rest[1:])), big


# ---- errors -------------------------------------------------------------------------


class ClaimsBackwards(beam.DoFn):
    def process(self, element, tracker=beam.DoFn.RestrictionParam(RangeProvider())):
        tracker.try_claim(3)
        tracker.try_claim(2)
        yield element


class OutputsWithoutClaim(beam.DoFn):
    def process(self, element, tracker=beam.DoFn.RestrictionParam(RangeProvider())):
        yield element


class StopsEarly(beam.DoFn):
    def process(self, element, tracker=beam.DoFn.RestrictionParam(RangeProvider())):
        if tracker.try_claim(tracker.current_restriction().start):
            yield element


@pytest.mark.parametrize("fn, words", [
    (ClaimsBackwards, "claimed after 3"),
    (OutputsWithoutClaim, "without a successful tracker.try_claim"),
    (StopsEarly, "is not done"),
])
def test_sdf_errors_name_the_step_and_the_element(make_pipeline, fn, words):
    with pytest.raises(HeadraceError) as info:
        with make_pipeline(max_bundle_attempts=1) as p:
            _ = p | beam.Create([8]) | "TheSdf" >> beam.ParDo(fn())
    text = str(info.value)
    assert "TheSdf" in text and words in text and "8" in text, text


class FailsInSetup(beam.DoFn):
    def setup(self):
        raise ConnectionError("cannot reach the server at example:1")

    def process(self, element, tracker=beam.DoFn.RestrictionParam(RangeProvider())):
        yield element


def test_an_sdf_whose_setup_fails_names_the_step_and_the_cause(make_pipeline):
    with pytest.raises(HeadraceError) as info:
        with make_pipeline(max_bundle_attempts=1) as p:
            _ = p | beam.Create([8]) | "TheSdf" >> beam.ParDo(FailsInSetup())
    text = str(info.value)
    assert "TheSdf" in text and "cannot reach the server at example:1" in text, text


def test_sdf_with_side_inputs_is_refused_when_built():
    with pytest.raises(PipelineConstructionError, match="side input"):
        with beam.Pipeline() as p:
            side = p | "Side" >> beam.Create([1])
            _ = p | beam.Create([3]) | beam.ParDo(EmitPositions(), beam.pvalue.AsList(side))


def test_sdf_without_a_provider_is_refused_when_built():
    class NoProvider(beam.DoFn):
        def process(self, element, tracker=beam.DoFn.RestrictionParam()):
            yield element

    with pytest.raises(PipelineConstructionError, match="its own RestrictionProvider"):
        with beam.Pipeline() as p:
            _ = p | beam.Create([3]) | "NoProv" >> beam.ParDo(NoProvider())


def test_unbounded_per_element_makes_any_dofns_output_unbounded():
    # as Beam's ParDo: the decorator, not the DoFn being splittable, makes the output unbounded
    class Endless(beam.DoFn):
        @beam.DoFn.unbounded_per_element()
        def process(self, element):
            yield element

    class Plain(beam.DoFn):
        def process(self, element):
            yield element

    p = beam.Pipeline()
    source = p | beam.Create([1])
    assert (source | "Endless" >> beam.ParDo(Endless())).is_bounded is False
    assert (source | "Plain" >> beam.ParDo(Plain())).is_bounded is True
    assert (source | "EndlessSdf" >> beam.ParDo(ReadQueue(None))).is_bounded is False
    assert (source | "Sdf" >> beam.ParDo(EmitPositions())).is_bounded is True


class EmitPositionsInWindow(beam.DoFn):
    """EmitPositions that reads its window: (element, position, window start)."""

    def process(self, element, w=beam.DoFn.WindowParam,
                tracker=beam.DoFn.RestrictionParam(RangeProvider(3))):
        pos = tracker.current_restriction().start
        while tracker.try_claim(pos):
            yield (element, pos), float(w.start)
            pos += 1


def test_sdf_over_elements_in_several_windows_reads_each_window_once(make_pipeline):
    ns = [4, 2]
    with make_pipeline() as p:
        out = (p | beam.Create(ns) | beam.Map(lambda n: beam.TimestampedValue(n, 10))
               | beam.WindowInto(window.SlidingWindows(10, 5)) | beam.ParDo(EmitPositionsInWindow()))
        # timestamp 10 is in the sliding windows starting at 5 and 10
        assert_that(out, equal_to([(kv, start) for kv in every_position(ns) for start in (5.0, 10.0)]))
