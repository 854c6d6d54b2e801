"""`with_exception_handling` arguments with Beam's meaning, on every runner.

`threshold` (per window, over the whole step: the run fails when more than that fraction of
the step's input went to the dead letter), `threshold_windowing`, `timeout` (a slow element
goes to the dead letter with a TimeoutError), `use_subprocess` (the DoFn runs in a child
process; an element that kills it goes to the dead letter, the others come out),
`on_failure_callback`, `partial`; and the arguments headrace refuses, each named in its
error. Expectations are computed from the inputs with plain Python.
"""

from __future__ import annotations

import os
import time

import pytest

import headrace as beam
from headrace.errors import (
    DeadLetterThresholdError, InvalidArgumentError, PipelineExecutionError, UnsupportedArgumentError,
)
from headrace.testing.util import assert_that, equal_to
from headrace.transforms import window
from tests._support import counter_value


def _fails_on(bad_values):
    bad_values = frozenset(bad_values)

    def fn(x):
        if x in bad_values:
            raise ValueError(f"bad {x}")
        return x * 10
    return fn


def _bad_summary(bad):
    return bad | "Summary" >> beam.Map(lambda b: (b[0], b[1][0].__name__, b[1].step))


# ---- threshold ---------------------------------------------------------------------------------


@pytest.mark.parametrize("threshold, fails", [(0.2, True), (0.25, False), (0.5, False)])
def test_threshold_fails_the_run_only_when_the_bad_fraction_exceeds_it(make_pipeline, threshold, fails):
    values = list(range(40))
    bad_values = [v for v in values if v % 4 == 1]  # a quarter of the input
    fraction = len(bad_values) / len(values)
    assert (fraction > threshold) == fails
    p = make_pipeline(bundle_size=7)
    good, bad = (p | beam.Create(values)
                 | "Risky" >> beam.Map(_fails_on(bad_values)).with_exception_handling(threshold=threshold))
    assert_that(good, equal_to([v * 10 for v in values if v not in bad_values]), label="good")
    assert_that(_bad_summary(bad), equal_to([(v, "ValueError", "Risky") for v in bad_values]),
                label="bad")
    if not fails:
        p.run().wait_until_finish()
        return
    with pytest.raises(DeadLetterThresholdError) as info:
        p.run().wait_until_finish()
    msg = str(info.value)
    assert isinstance(info.value, PipelineExecutionError) and info.value.step == "Risky"
    assert f"{len(bad_values)} of the {len(values)}" in msg and "Risky" in msg
    assert f"threshold={threshold}" in msg


def test_threshold_counts_the_whole_step_not_each_bundle(make_pipeline):
    # the first bundle is all bad, the step as a whole is 20% bad
    values = [0, 1] + list(range(2, 10))
    bad_values = [0, 1]

    def build(p, threshold):
        return (p | beam.Create(values)
                | "Risky" >> beam.Map(_fails_on(bad_values)).with_exception_handling(threshold=threshold))

    with make_pipeline(bundle_size=2) as p:
        good, _ = build(p, 0.5)
        assert_that(good, equal_to([v * 10 for v in values if v not in bad_values]))
    p = make_pipeline(bundle_size=2)
    build(p, 0.1)
    with pytest.raises(DeadLetterThresholdError, match="2 of the 10"):
        p.run().wait_until_finish()


def test_threshold_is_checked_per_window(make_pipeline):
    # window [0, 10): 2 of 4 bad; window [10, 20): 0 of 4 bad; overall 25%
    stamped = [(v, t) for v, t in zip(range(8), [1, 2, 3, 4, 11, 12, 13, 14])]
    bad_values = [0, 1]
    overall = len(bad_values) / len(stamped)

    def build(p, windowing):
        return (p | beam.Create([window.TimestampedValue(v, t) for v, t in stamped])
                | "Risky" >> beam.Map(_fails_on(bad_values)).with_exception_handling(
                    threshold=0.3, threshold_windowing=windowing))

    assert overall < 0.3
    with make_pipeline() as p:  # counted in the input's (global) window: 25% passes
        build(p, None)
    p = make_pipeline()
    build(p, window.FixedWindows(10))
    with pytest.raises(DeadLetterThresholdError, match=r"Risky.*2 of the 4 input elements in window"):
        p.run().wait_until_finish()


def test_threshold_on_a_step_with_more_tagged_outputs(make_pipeline):
    class Split(beam.DoFn):
        def process(self, x):
            if x == 0:
                raise ZeroDivisionError("zero")
            yield beam.pvalue.TaggedOutput("odd", x) if x % 2 else x

    values = list(range(10))
    with make_pipeline() as p:
        res = (p | beam.Create(values)
               | "Split" >> beam.ParDo(Split()).with_outputs("odd").with_exception_handling(threshold=0.5))
        assert_that(res.good, equal_to([x for x in values if x and x % 2 == 0]), label="even")
        assert_that(res.odd, equal_to([x for x in values if x % 2]), label="odd")
        assert_that(_bad_summary(res.bad), equal_to([(0, "ZeroDivisionError", "Split")]), label="bad")
    p = make_pipeline()  # 1 of 10 bad is more than 5%
    _ = (p | beam.Create(values)
         | "Split" >> beam.ParDo(Split()).with_outputs("odd").with_exception_handling(threshold=0.05))
    with pytest.raises(DeadLetterThresholdError, match="Split"):
        p.run().wait_until_finish()


def test_with_outputs_after_with_exception_handling_keeps_its_main_tag(make_pipeline):
    class Split(beam.DoFn):
        def process(self, x):
            if x == 0:
                raise ZeroDivisionError("zero")
            yield beam.pvalue.TaggedOutput("odd", x) if x % 2 else x

    values = list(range(6))
    with make_pipeline() as p:
        res = (p | beam.Create(values)
               | "Split" >> beam.ParDo(Split()).with_exception_handling(main_tag="ok").with_outputs("odd"))
        assert_that(res.ok, equal_to([x for x in values if x and x % 2 == 0]), label="even")
        assert_that(res.odd, equal_to([x for x in values if x % 2]), label="odd")
        assert_that(_bad_summary(res.bad), equal_to([(0, "ZeroDivisionError", "Split")]), label="bad")


# ---- timeout -----------------------------------------------------------------------------------


def _slow_on(slow_values, seconds):
    slow_values = frozenset(slow_values)

    def fn(x):
        if x in slow_values:
            time.sleep(seconds)
        return x + 100
    return fn


def test_timeout_sends_a_slow_element_to_the_dead_letter(make_pipeline):
    values = list(range(6))
    slow = [3]
    started = time.monotonic()
    with make_pipeline() as p:
        good, bad = (p | beam.Create(values)
                     | "Slow" >> beam.Map(_slow_on(slow, 4)).with_exception_handling(timeout=0.5))
        assert_that(good, equal_to([v + 100 for v in values if v not in slow]), label="good")
        assert_that(_bad_summary(bad), equal_to([(v, "TimeoutError", "Slow") for v in slow]), label="bad")
    assert time.monotonic() - started < 60


def test_timeout_does_not_catch_an_exception_outside_exc_class(make_pipeline):
    p = make_pipeline(max_bundle_attempts=1)
    _ = (p | beam.Create([1, 2])
         | "Slow" >> beam.Map(_slow_on([2], 3)).with_exception_handling(timeout=0.3, exc_class=KeyError))
    with pytest.raises(PipelineExecutionError, match=r"Slow.*TimeoutError"):
        p.run().wait_until_finish()


# ---- use_subprocess ----------------------------------------------------------------------------


class ExitOn(beam.DoFn):
    """Kills its whole process on some elements, raises on others; counts what it processed."""

    def __init__(self, exit_on, raise_on):
        self.exit_on, self.raise_on = frozenset(exit_on), frozenset(raise_on)

    def setup(self):
        self.pid = os.getpid()

    def process(self, x):
        if x in self.exit_on:
            os._exit(3)
        if x in self.raise_on:
            raise ValueError(f"cannot take {x}")
        beam.Metrics.counter("test", "processed").inc()
        yield (x, self.pid != 0)


def test_use_subprocess_survives_a_dofn_that_kills_its_process(make_pipeline):
    values = list(range(12))
    exit_on, raise_on = [2, 9], [5]
    with make_pipeline(bundle_size=4) as p:
        good, bad = (p | beam.Create(values)
                     | "Fragile" >> beam.ParDo(ExitOn(exit_on, raise_on)).with_exception_handling(
                         use_subprocess=True))
        ok = [v for v in values if v not in exit_on and v not in raise_on]
        assert_that(good, equal_to([(v, True) for v in ok]), label="good")
        expected_bad = ([(v, "BrokenProcessPool", "Fragile") for v in exit_on]
                        + [(v, "ValueError", "Fragile") for v in raise_on])
        assert_that(_bad_summary(bad), equal_to(expected_bad), label="bad")
        described = bad | "Why" >> beam.Map(lambda b: (b[0], b[1][1]))
        assert_that(described | beam.Filter(lambda d: d[0] in raise_on),
                    equal_to([(v, repr(ValueError(f"cannot take {v}"))) for v in raise_on]),
                    label="remote_error")
        assert_that(described | "Crashes" >> beam.Filter(lambda d: d[0] in exit_on)
                    | "ExitCode" >> beam.Map(lambda d: (d[0], "exit code 3" in d[1])),
                    equal_to([(v, True) for v in exit_on]), label="exit_code")


def test_use_subprocess_reports_the_dofns_metrics(make_pipeline):
    values = list(range(10))
    exit_on, raise_on = [4], [7]
    p = make_pipeline(bundle_size=3)
    _ = (p | beam.Create(values)
         | "Fragile" >> beam.ParDo(ExitOn(exit_on, raise_on)).with_exception_handling(use_subprocess=True))
    result = p.run()
    result.wait_until_finish()
    assert counter_value(result, "processed") == len(values) - len(exit_on) - len(raise_on)


def test_use_subprocess_with_timeout_kills_a_stuck_element(make_pipeline):
    values = list(range(5))
    started = time.monotonic()
    with make_pipeline() as p:
        good, bad = (p | beam.Create(values)
                     | "Stuck" >> beam.Map(_slow_on([1], 120)).with_exception_handling(
                         use_subprocess=True, timeout=1))
        assert_that(good, equal_to([v + 100 for v in values if v != 1]), label="good")
        assert_that(_bad_summary(bad), equal_to([(1, "TimeoutError", "Stuck")]), label="bad")
    assert time.monotonic() - started < 60


class EmitsInFinishBundle(beam.DoFn):
    def process(self, x):
        yield x

    def finish_bundle(self):
        from headrace.utils.windowed_value import WindowedValue
        from headrace.transforms.window import GlobalWindow
        yield WindowedValue("late", 0, [GlobalWindow()])


def test_use_subprocess_refuses_outputs_from_finish_bundle(make_pipeline):
    p = make_pipeline(max_bundle_attempts=1)
    _ = p | beam.Create([1]) | "Flush" >> beam.ParDo(EmitsInFinishBundle()).with_exception_handling(
        use_subprocess=True)
    with pytest.raises(PipelineExecutionError, match=r"Flush.*finish_bundle.*use_subprocess"):
        p.run().wait_until_finish()


# ---- on_failure_callback and partial -----------------------------------------------------------


def test_on_failure_callback_gets_the_exception_and_the_element(make_pipeline, journal):
    values = list(range(10))
    bad_values = [2, 3, 7]

    def callback(exc, element):
        journal.write(type(exc).__name__, str(exc), element)

    with make_pipeline(bundle_size=3) as p:
        good, _ = (p | beam.Create(values)
                   | "Risky" >> beam.Map(_fails_on(bad_values)).with_exception_handling(
                       on_failure_callback=callback))
        assert_that(good, equal_to([v * 10 for v in values if v not in bad_values]))
    assert sorted(map(tuple, journal.read())) == [("ValueError", f"bad {v}", v) for v in bad_values]


def test_on_failure_callback_on_timeouts_and_crashes(make_pipeline, journal):
    def callback(exc, element):
        journal.write(type(exc).__name__, element)

    with make_pipeline() as p:
        pc = p | beam.Create(list(range(4)))
        _ = pc | "Slow" >> beam.Map(_slow_on([1], 3)).with_exception_handling(
            timeout=0.3, on_failure_callback=callback)
        _ = pc | "Crash" >> beam.ParDo(ExitOn([2], [])).with_exception_handling(
            use_subprocess=True, on_failure_callback=callback)
    assert sorted(map(tuple, journal.read())) == [("BrokenProcessPool", 2), ("TimeoutError", 1)]


def test_a_failing_on_failure_callback_does_not_lose_the_element(make_pipeline, journal):
    def callback(exc, element):
        journal.write(element)
        raise RuntimeError("callback broke")

    with make_pipeline() as p:
        good, bad = (p | beam.Create([1, 2, 3])
                     | "Risky" >> beam.Map(_fails_on([2])).with_exception_handling(
                         on_failure_callback=callback))
        assert_that(good, equal_to([10, 30]), label="good")
        assert_that(_bad_summary(bad), equal_to([(2, "ValueError", "Risky")]), label="bad")
    assert journal.read() == [[2]]


@pytest.mark.parametrize("partial", [False, True])
def test_partial_keeps_the_outputs_produced_before_a_failure(make_pipeline, partial):
    def explode(s):
        for part in s.split(","):
            yield int(part)

    values = ["1,2", "3,x,4", "5"]
    expected = []
    for v in values:
        produced = []
        try:
            for o in explode(v):
                produced.append(o)
        except ValueError:
            if partial:
                expected += produced
            continue
        expected += produced
    with make_pipeline() as p:
        good, bad = (p | beam.Create(values)
                     | "Explode" >> beam.FlatMap(explode).with_exception_handling(partial=partial))
        assert_that(good, equal_to(expected), label="good")
        assert_that(_bad_summary(bad), equal_to([("3,x,4", "ValueError", "Explode")]), label="bad")


# ---- refused arguments -------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, name, error", [
    ({"error_handler": object()}, "error_handler", UnsupportedArgumentError),
    ({"partial": True, "use_subprocess": True}, "partial", InvalidArgumentError),
    ({"threshold": -0.1}, "threshold", InvalidArgumentError),
    ({"threshold": "half"}, "threshold", InvalidArgumentError),
    ({"threshold_windowing": 60}, "threshold_windowing", InvalidArgumentError),
    ({"timeout": 0}, "timeout", InvalidArgumentError),
    ({"timeout": "1s"}, "timeout", InvalidArgumentError),
    ({"on_failure_callback": "log"}, "on_failure_callback", InvalidArgumentError),
    ({"exc_class": 3}, "exc_class", InvalidArgumentError),
    ({"main_tag": "x", "dead_letter_tag": "x"}, "dead_letter_tag", InvalidArgumentError),
])
def test_bad_or_unsupported_arguments_are_refused_naming_them(kwargs, name, error):
    with pytest.raises(error, match=name):
        beam.Map(str).with_exception_handling(**kwargs)


def test_unknown_arguments_are_refused():
    with pytest.raises(TypeError, match="no_such_option"):
        beam.Map(str).with_exception_handling(no_such_option=1)


def test_threshold_on_unbounded_global_input_needs_threshold_windowing(make_pipeline):
    from headrace.testing.test_stream import TestStream
    p = make_pipeline()
    stream = p | TestStream().add_elements([1]).advance_watermark_to_infinity()
    with pytest.raises(InvalidArgumentError, match="Risky.*threshold_windowing"):
        stream | "Risky" >> beam.Map(str).with_exception_handling(threshold=0.1)
