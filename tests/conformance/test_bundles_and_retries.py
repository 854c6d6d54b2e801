"""Bundles and retries, after Beam's execution model.

A runner processes elements in bundles. When processing an element fails, the whole bundle
is retried: the failed attempt's outputs are discarded (so the final output holds each result
exactly once), its DoFn instances are torn down, and committed metrics count only successful
attempts while attempted metrics include the failed ones. Steps fused with the failing step
fail with it (coupled failure) and re-process the bundle too. After `max_bundle_attempts`
attempts the pipeline fails, naming the step and the element.

Decisions that must hold across attempts ("fail the first time only") and records of what
ran are kept in files (`Once`, `Journal`), which work in any process.
"""

from __future__ import annotations

import collections

import pytest

import headrace as beam
from headrace.errors import PipelineExecutionError
from headrace.testing.util import assert_that, equal_to
from headrace.transforms import window
from tests._support import counter_value, new_instance_id

TV = beam.TimestampedValue


class FailOnceDoFn(beam.DoFn):
    """Passes elements through; raises the first time it sees `bad`. Journals everything."""

    def __init__(self, journal, once, bad, tag="B"):
        self.journal, self.once, self.bad, self.tag = journal, once, bad, tag

    def setup(self):
        self.iid = new_instance_id()
        self.journal.write(self.tag, "setup", self.iid)

    def process(self, element):
        beam.Metrics.counter("retry", f"{self.tag}_processed").inc()
        self.journal.write(self.tag, "process", self.iid, element)
        if element == self.bad and self.once.first(f"{self.tag}-{element!r}"):
            self.journal.write(self.tag, "fail", self.iid, element)
            raise RuntimeError(f"transient failure on {element!r}")
        yield element

    def teardown(self):
        self.journal.write(self.tag, "teardown", self.iid)


def test_failed_bundle_is_retried_and_output_has_no_duplicates(make_pipeline, journal, once):
    n, bad = 10, 5
    p = make_pipeline(bundle_size=2)
    out = p | beam.Create(list(range(n))) | "FailOnce" >> beam.ParDo(FailOnceDoFn(journal, once, bad))
    assert_that(out, equal_to(list(range(n))))
    result = p.run()

    events = journal.read()
    processed = [e[3] for e in events if e[1] == "process"]
    assert collections.Counter(processed)[bad] == 2, "the failing element was not retried once"
    fails = [e for e in events if e[1] == "fail"]
    assert len(fails) == 1
    failed_iid = fails[0][2]
    # the instance whose bundle failed is discarded: its next (and last) event is teardown,
    # and the retry runs on a fresh instance
    fail_pos = events.index(fails[0])
    after = [e[1] for e in events[fail_pos + 1:] if e[2] == failed_iid]
    assert after == ["teardown"], f"failed instance did {after} after failing"
    retry = [e for e in events[fail_pos + 1:] if e[1] == "process" and e[3] == bad]
    assert len(retry) == 1 and retry[0][2] != failed_iid

    # committed metrics count each element once; attempted ones include the failed attempt
    assert counter_value(result, "B_processed") == n
    assert counter_value(result, "B_processed", attempted=True) == len(processed)
    assert len(processed) > n


class RecordDoFn(beam.DoFn):
    """Step A: journals each element it processes and passes it on."""

    def __init__(self, journal):
        self.journal = journal

    def process(self, element):
        beam.Metrics.counter("retry", "A_processed").inc()
        self.journal.write("A", "process", element)
        yield element


def test_coupled_failure_reprocesses_the_whole_bundle_in_fused_steps(make_pipeline, journal, once):
    n, bundle_size = 10, 2
    bad = 5  # the second element of the bundle [4, 5]: A has processed 4 and 5 when B fails
    p = make_pipeline(bundle_size=bundle_size)
    out = (p | beam.Create(list(range(n)))
           | "A" >> beam.ParDo(RecordDoFn(journal))
           | "B" >> beam.ParDo(FailOnceDoFn(journal, once, bad)))
    assert_that(out, equal_to(list(range(n))))
    result = p.run()

    a_calls = [e[2] for e in journal.read() if e[0] == "A" and e[1] == "process"]
    failed_bundle = [4, 5]
    assert len(a_calls) == n + len(failed_bundle)
    counts = collections.Counter(a_calls)
    assert {x for x, c in counts.items() if c == 2} == set(failed_bundle)
    assert all(counts[x] == 1 for x in range(n) if x not in failed_bundle)
    assert counter_value(result, "A_processed") == n
    assert counter_value(result, "A_processed", attempted=True) == n + len(failed_bundle)


def test_coupled_failure_with_map_steps(make_pipeline, journal, once):
    n = 8

    def a(x, journal=journal):
        journal.write("A", "process", x)
        return x * 2

    def b(x, once=once):
        if x == 6 and once.first("b6"):
            raise ValueError("flaky")
        return x + 1

    with make_pipeline(bundle_size=2) as p:
        out = p | beam.Create(list(range(n))) | "A" >> beam.Map(a) | "B" >> beam.Map(b)
        assert_that(out, equal_to([x * 2 + 1 for x in range(n)]))
    a_calls = collections.Counter(e[2] for e in journal.read() if e[0] == "A")
    assert a_calls == collections.Counter(list(range(n)) + [2, 3])  # bundle [2, 3] ran twice


class AlwaysFails(beam.DoFn):
    def __init__(self, journal, bad):
        self.journal, self.bad = journal, bad

    def process(self, element):
        self.journal.write("attempt", element)
        if element == self.bad:
            raise ValueError("this element can never be processed")
        yield element


def test_pipeline_fails_after_max_bundle_attempts_naming_step_and_element(make_pipeline, journal):
    bad = "poison-pill"
    p = make_pipeline(bundle_size=2, max_bundle_attempts=3)
    p | beam.Create(["ok-1", bad, "ok-2"]) | "ParsePoison" >> beam.ParDo(AlwaysFails(journal, bad))
    with pytest.raises(PipelineExecutionError) as info:
        p.run()
    message = str(info.value)
    assert "ParsePoison" in message
    assert repr(bad) in message
    attempts = [e[1] for e in journal.read() if e[1] == bad]
    assert len(attempts) == 3


def test_max_bundle_attempts_one_means_no_retry(make_pipeline, journal, once):
    p = make_pipeline(max_bundle_attempts=1)
    p | beam.Create([1, 2, 3]) | "Flaky" >> beam.ParDo(FailOnceDoFn(journal, once, 2))
    with pytest.raises(PipelineExecutionError) as info:
        p.run()
    assert "Flaky" in str(info.value)


class FailOnceInFinishBundle(beam.DoFn):
    def __init__(self, once):
        self.once = once

    def start_bundle(self):
        self.seen = []

    def process(self, element):
        self.seen.append(element)
        yield element

    def finish_bundle(self):
        if 3 in self.seen and self.once.first("finish"):
            raise RuntimeError("finish_bundle failed")


def test_failure_in_finish_bundle_retries_the_bundle(make_pipeline, once):
    with make_pipeline(bundle_size=2) as p:
        out = p | beam.Create(list(range(6))) | beam.ParDo(FailOnceInFinishBundle(once))
        assert_that(out, equal_to(list(range(6))))


class FailOnceInSetup(beam.DoFn):
    def __init__(self, once):
        self.once = once

    def setup(self):
        if self.once.first("setup"):
            raise RuntimeError("setup failed")

    def process(self, element):
        yield element + 100


def test_failure_in_setup_is_retried(make_pipeline, once):
    with make_pipeline(bundle_size=2) as p:
        out = p | beam.Create([1, 2, 3]) | beam.ParDo(FailOnceInSetup(once))
        assert_that(out, equal_to([101, 102, 103]))


def test_failure_after_group_by_key_is_retried(make_pipeline, journal, once):
    pairs = [(k, v) for k in "abcdef" for v in range(3)]
    with make_pipeline(bundle_size=2) as p:
        out = (p | beam.Create(pairs)
               | beam.GroupByKey()
               | beam.MapTuple(lambda k, vs: (k, sum(vs)))
               | "Flaky" >> beam.ParDo(FailOnceDoFn(journal, once, ("c", 3))))
        assert_that(out, equal_to([(k, 3) for k in "abcdef"]))
    assert any(e[1] == "fail" for e in journal.read())


def test_failure_in_a_windowed_combine_pipeline_does_not_double_count(make_pipeline, journal, once):
    data = [("k", i, i * 7) for i in range(20)]
    sums = collections.defaultdict(int)
    for k, v, t in data:
        sums[(k, t // 30)] += v
    with make_pipeline(bundle_size=3) as p:
        out = (p | beam.Create([TV((k, v), t) for k, v, t in data])
               | "Flaky" >> beam.ParDo(FailOnceDoFn(journal, once, ("k", 10)))
               | beam.WindowInto(window.FixedWindows(30))
               | beam.CombinePerKey(sum)
               | beam.Map(lambda kv, w=beam.DoFn.WindowParam: ((kv[0], int(w.start) // 30), kv[1])))
        assert_that(out, equal_to(list(sums.items())))


def test_failure_in_step_reading_side_input_is_retried(make_pipeline, once):
    def add(x, side, once=once):
        if x == 2 and once.first("side"):
            raise RuntimeError("flaky")
        return x + side

    with make_pipeline(bundle_size=1) as p:
        side = p | "Side" >> beam.Create([100])
        out = p | beam.Create([1, 2, 3]) | beam.Map(add, beam.pvalue.AsSingleton(side))
        assert_that(out, equal_to([101, 102, 103]))
