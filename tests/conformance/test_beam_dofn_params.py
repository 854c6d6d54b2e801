"""DoFn parameters on every runner: DoFn.SideInputParam, KeyParam, PaneInfoParam,
BundleFinalizerParam, and pvalue.EmptySideInput.

Bundle finalization callbacks run in the worker that processed the bundle, so they append to a
journal file (tests/_support.Journal) that every runner's workers can write to.
"""

from __future__ import annotations

import pytest

import headrace as beam
from headrace.errors import InvalidArgumentError
from headrace.pipeline.dofn import _BundleFinalizerParam
from headrace.testing.test_stream import TestStream
from headrace.testing.util import assert_that, equal_to
from headrace.transforms import window
from headrace.transforms.window import TimestampedValue

TV = beam.TimestampedValue


# ---------------------------------------------------------------------------------------
# SideInputParam


class _ScaleBySide(beam.DoFn):
    """A side input declared after a special parameter: Beam fills it with the ParDo's argument."""

    def process(self, element, ts=beam.DoFn.TimestampParam, factor=beam.DoFn.SideInputParam,
                offset=0):
        yield (element * factor + offset, ts.micros // 1_000_000)


def test_side_input_param_takes_the_pardos_extra_arguments_in_order(make_pipeline):
    with make_pipeline() as p:
        main = p | beam.Create([TV(1, 10), TV(2, 20)])
        factor = p | "Factor" >> beam.Create([5])
        out = main | "Side" >> beam.ParDo(_ScaleBySide(), beam.pvalue.AsSingleton(factor))
        assert_that(out, equal_to([(5, 10), (10, 20)]), label="side")
        # a plain value fills it too, and the next extra argument goes to the next parameter
        out2 = main | "Plain" >> beam.ParDo(_ScaleBySide(), 3, 100)
        assert_that(out2, equal_to([(103, 10), (106, 20)]), label="plain")
        # or by name
        out3 = main | "Named" >> beam.ParDo(_ScaleBySide(), factor=beam.pvalue.AsSingleton(factor))
        assert_that(out3, equal_to([(5, 10), (10, 20)]), label="named")


def test_side_input_param_without_an_argument_is_refused():
    with pytest.raises(InvalidArgumentError, match="'factor'.*SideInputParam"):
        beam.ParDo(_ScaleBySide())


def test_empty_side_input_reads_as_an_empty_side_input_object(make_pipeline):
    with make_pipeline() as p:
        main = p | beam.Create([1])
        empty = p | "Empty" >> beam.Create([])
        out = main | beam.Map(lambda x, s: isinstance(s, beam.pvalue.EmptySideInput),
                              beam.pvalue.AsSingleton(empty))
        assert_that(out, equal_to([True]))


# ---------------------------------------------------------------------------------------
# KeyParam, PaneInfoParam


class _KeyAndPane(beam.DoFn):
    def process(self, element, key=beam.DoFn.KeyParam, pane=beam.DoFn.PaneInfoParam):
        yield (key, sum(element[1]), pane.timing.name, pane.is_first, pane.is_last, pane.index)


def test_key_param_and_pane_info_param_after_a_grouping(make_pipeline):
    data = [TV(("a", 1), 1), TV(("a", 2), 2), TV(("b", 5), 3)]
    with make_pipeline() as p:
        grouped = (p | beam.Create(data) | beam.WindowInto(window.FixedWindows(10))
                   | beam.GroupByKey())
        out = grouped | beam.ParDo(_KeyAndPane())
        # the default trigger: one ON_TIME pane per key and window, first and last
        assert_that(out, equal_to([("a", 3, "ON_TIME", True, True, 0),
                                   ("b", 5, "ON_TIME", True, True, 0)]))


def test_key_param_on_an_element_that_is_not_a_pair_fails_clearly(make_pipeline):
    p = make_pipeline(max_bundle_attempts=1)
    _ = p | beam.Create(["abc"]) | beam.ParDo(_KeyAndPane())
    with pytest.raises(Exception, match="DoFn.KeyParam.*key of a \\(key, value\\) element"):
        p.run()


# ---------------------------------------------------------------------------------------
# BundleFinalizerParam


class _Finalizing(beam.DoFn):
    """Registers, once per bundle, a callback that journals the bundle's elements."""

    def __init__(self, journal, fail_on=None):
        self.journal = journal
        self.fail_on = fail_on

    def start_bundle(self):
        self.seen = []
        self.registered = False

    def process(self, element, finalizer=beam.DoFn.BundleFinalizerParam):
        assert isinstance(finalizer, _BundleFinalizerParam)
        if not self.registered:
            seen = self.seen
            journal = self.journal
            finalizer.register(lambda: journal.write("finalized", sorted(seen)))
            self.registered = True
        if element == self.fail_on and self.journal_failures() == 0:
            self.journal.write("failed", element)
            raise RuntimeError("transient failure")
        self.seen.append(element)
        yield element

    def journal_failures(self):
        return sum(1 for e in self.journal.read() if e[0] == "failed")


def test_bundle_finalizer_callbacks_run_once_per_committed_bundle(make_pipeline, journal):
    values = list(range(12))
    with make_pipeline(bundle_size=4) as p:
        out = p | beam.Create(values) | beam.ParDo(_Finalizing(journal)) | beam.Map(lambda x: x + 1)
        assert_that(out, equal_to([v + 1 for v in values]))
    finalized = [e[1] for e in journal.read() if e[0] == "finalized"]
    # every element in exactly one finalized bundle (bundles of at most 4 elements)
    assert sorted(x for b in finalized for x in b) == values
    assert all(1 <= len(b) <= 4 for b in finalized)


def test_bundle_finalizer_callbacks_run_on_a_stream(make_pipeline, journal):
    # on the Spark runner, a streaming query: each micro-batch's bundles are finalized once
    # their outputs are handed on
    stream = (TestStream().add_elements([TimestampedValue(v, v) for v in range(6)])
              .advance_watermark_to(10)
              .add_elements([TimestampedValue(v, v) for v in range(6, 10)])
              .advance_watermark_to_infinity())
    with make_pipeline() as p:
        out = p | stream | beam.ParDo(_Finalizing(journal)) | beam.Map(lambda x: x * 2)
        assert_that(out, equal_to([v * 2 for v in range(10)]))
    finalized = [e[1] for e in journal.read() if e[0] == "finalized"]
    assert sorted(x for b in finalized for x in b) == list(range(10)), finalized
    # a bundle never spans two of the TestStream's element events
    assert all(set(b) <= set(range(6)) or set(b) <= set(range(6, 10)) for b in finalized), finalized


def test_bundle_finalizer_callbacks_of_a_failed_attempt_never_run(make_pipeline, journal):
    values = list(range(8))
    with make_pipeline(bundle_size=8, max_bundle_attempts=3) as p:
        out = p | beam.Create(values) | beam.ParDo(_Finalizing(journal, fail_on=5))
        assert_that(out, equal_to(values))
    events = journal.read()
    assert [e for e in events if e[0] == "failed"] == [["failed", 5]]
    finalized = [e[1] for e in events if e[0] == "finalized"]
    # the failed attempt had seen 0..4 and registered its callback: it never ran; the retry's did
    assert sorted(x for b in finalized for x in b) == values


# ---------------------------------------------------------------------------------------
# extra positional arguments of ParDo / Map and special parameters


class _Scale(beam.DoFn):
    """A special parameter declared before the parameters the ParDo's arguments fill."""

    def process(self, element, window=beam.DoFn.WindowParam, factor=1, offset=0):
        yield element * factor + offset, window.start


def test_extra_arguments_skip_special_parameters_declared_before_them(make_pipeline):
    # Beam fills the parameters that are not special, in order: factor=10, offset=3
    with make_pipeline() as p:
        stamped = (p | beam.Create([1, 2, 25]) | beam.Map(lambda x: TimestampedValue(x, x))
                   | beam.WindowInto(window.FixedWindows(10)))
        out = stamped | beam.ParDo(_Scale(), 10, 3)
        mapped = stamped | "Map" >> beam.Map(
            lambda x, ts=beam.DoFn.TimestampParam, k=0: (x + k, int(ts.micros // 1_000_000)), 100)
        assert_that(out, equal_to([(13, 0), (23, 0), (253, 20)]))
        assert_that(mapped, equal_to([(101, 1), (102, 2), (125, 25)]), label="CheckMap")


def test_finish_bundle_outputs_made_by_global_windows_windowed_value(make_pipeline):
    # Beam's GlobalWindows.windowed_value (default MIN_TIMESTAMP) and
    # windowed_value_at_end_of_window, the usual finish_bundle outputs
    W = window

    class CountPerBundle(beam.DoFn):
        def start_bundle(self):
            self.n = 0

        def process(self, x):
            self.n += 1

        def finish_bundle(self):
            yield W.GlobalWindows.windowed_value(self.n)
            yield W.GlobalWindows.windowed_value_at_end_of_window(-self.n)

    with make_pipeline() as p:
        out = (p | beam.Create(list(range(250))) | beam.ParDo(CountPerBundle())
               | beam.Map(lambda n, ts=beam.DoFn.TimestampParam: (n > 0, n, ts)))
        signs = out | "Sum" >> beam.Map(lambda t: (t[0], t[1])) | beam.CombinePerKey(sum)
        assert_that(signs, equal_to([(True, 250), (False, -250)]), label="Totals")
        times = (out | "Times" >> beam.Map(lambda t: (t[0], t[2].micros)) | beam.Distinct())
        assert_that(times, equal_to([(True, W.MIN_TIMESTAMP.micros),
                                     (False, W.GlobalWindow().max_timestamp().micros)]), label="Times")



def test_with_outputs_without_tags_gives_a_do_outputs_tuple(make_pipeline):
    # Beam: with_outputs() (no tags) and with_outputs(main=...) give a DoOutputsTuple (headrace
    # gave a plain PCollection)
    with make_pipeline() as p:
        nums = p | beam.Create([1, 2, 3])
        plain = nums | "NoTags" >> beam.Map(lambda x: x * 10).with_outputs()
        named = nums | "MainOnly" >> beam.Map(lambda x: x + 1).with_outputs(main="incremented")
        assert len(plain) == 1 and len(named) == 1
        assert_that(plain[None], equal_to([10, 20, 30]), label="Plain")
        assert_that(named.incremented, equal_to([2, 3, 4]), label="Named")
        (main_only,) = named
        assert_that(main_only, equal_to([2, 3, 4]), label="Unpacked")


def _by_parity(x):
    yield beam.pvalue.TaggedOutput("even" if x % 2 == 0 else "odd", x)
    if x % 3 == 0:
        yield beam.pvalue.TaggedOutput("threes", x)
    yield x


def test_with_outputs_without_tags_reads_any_tag_and_drops_the_unread_ones(make_pipeline):
    # Beam: a tag read from with_outputs() without tags becomes an output when first read; what
    # goes to a tag nobody read ('threes') is dropped
    with make_pipeline() as p:
        results = p | beam.Create(range(7)) | beam.FlatMap(_by_parity).with_outputs()
        assert_that(results.odd, equal_to([1, 3, 5]), label="Odd")
        assert_that(results["even"], equal_to([0, 2, 4, 6]), label="Even")
        assert_that(results[None], equal_to(list(range(7))), label="Main")
        assert results.odd is results["odd"]


def test_allow_unknown_tags_with_declared_tags(make_pipeline):
    with make_pipeline() as p:
        results = (p | beam.Create(range(7))
                   | beam.FlatMap(_by_parity).with_outputs("odd", allow_unknown_tags=True))
        main, odd = results  # unpacking gives the main output and the declared tags
        assert_that(odd, equal_to([1, 3, 5]), label="Odd")
        assert_that(results.threes, equal_to([0, 3, 6]), label="Threes")


def test_a_tag_not_declared_is_an_error_without_allow_unknown_tags(make_pipeline):
    from headrace.errors import PipelineConstructionError, PipelineExecutionError

    p = make_pipeline()
    results = p | beam.Create(range(3)) | beam.FlatMap(_by_parity).with_outputs("odd", "even")
    with pytest.raises(PipelineConstructionError, match="declare more with .with_outputs"):
        results.threes
    with pytest.raises(PipelineExecutionError, match="undeclared output tag 'threes'"):
        p.run().wait_until_finish()
