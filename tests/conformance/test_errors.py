"""Bad input: errors at construction when they can be detected there, clear errors at run time
otherwise, and dead-letter outputs with `with_exception_handling()`."""

from __future__ import annotations

import pytest

import headrace as beam
from headrace import errors
from headrace.errors import (
    DuplicateLabelError, InvalidArgumentError, PipelineConstructionError, PipelineExecutionError,
)
from headrace.testing.util import assert_that, equal_to
from headrace.transforms import window
from headrace.utils.timestamp import Timestamp

TV = beam.TimestampedValue


# ---------------------------------------------------------------------------------------
# construction-time errors


def test_duplicate_label_raises(make_pipeline):
    p = make_pipeline()
    pc = p | beam.Create([1, 2])
    pc | "Double" >> beam.Map(lambda x: x * 2)
    with pytest.raises(DuplicateLabelError) as info:
        pc | "Double" >> beam.Map(lambda x: x * 3)
    assert isinstance(info.value, RuntimeError)
    assert isinstance(info.value, PipelineConstructionError)
    assert "Double" in str(info.value)


def test_same_label_in_different_composites_is_allowed(make_pipeline):
    class Inc(beam.PTransform):
        def expand(self, pcoll):
            return pcoll | "Step" >> beam.Map(lambda x: x + 1)

    with make_pipeline() as p:
        out = p | beam.Create([1]) | "First" >> Inc() | "Second" >> Inc()
        assert_that(out, equal_to([3]))


@pytest.mark.parametrize("make_transform", [
    lambda: beam.GroupByKey(),
    lambda: beam.CombinePerKey(sum),
], ids=["GroupByKey", "CombinePerKey"])
def test_grouping_a_pcollection_of_str_raises_at_construction(make_pipeline, make_transform):
    p = make_pipeline()
    words = p | beam.Create(["a", "b"])
    with pytest.raises(PipelineConstructionError) as info:
        words | "GroupTheWords" >> make_transform()
    assert "GroupTheWords" in str(info.value)


def test_grouping_non_pairs_of_unknown_type_fails_at_run_time_naming_the_step(make_pipeline):
    p = make_pipeline()
    (p | beam.Create([1, 2, 3]) | "Identity" >> beam.Map(lambda x: x)
     | "GroupNumbers" >> beam.GroupByKey())
    with pytest.raises(PipelineExecutionError) as info:
        p.run()
    assert "GroupNumbers" in str(info.value)


def test_grouping_triples_fails_at_run_time(make_pipeline):
    p = make_pipeline()
    p | beam.Create([1]) | beam.Map(lambda x: (x, x, x)) | "GroupTriples" >> beam.GroupByKey()
    with pytest.raises(PipelineExecutionError) as info:
        p.run()
    assert "GroupTriples" in str(info.value)


@pytest.mark.parametrize("bad", [5, "not callable", None])
def test_map_of_non_callable_raises(bad):
    with pytest.raises(InvalidArgumentError):
        beam.Map(bad)


def test_flatmap_and_filter_of_non_callable_raise():
    with pytest.raises(InvalidArgumentError):
        beam.FlatMap(5)
    with pytest.raises(InvalidArgumentError):
        beam.Filter(5)


class MyDoFn(beam.DoFn):
    def process(self, element):
        yield element


def test_pardo_of_dofn_class_instead_of_instance_raises():
    with pytest.raises(InvalidArgumentError) as info:
        beam.ParDo(MyDoFn)
    assert "MyDoFn" in str(info.value)


def test_pardo_of_plain_function_raises():
    with pytest.raises(InvalidArgumentError):
        beam.ParDo(lambda x: x)


@pytest.mark.parametrize("make", [
    lambda: window.FixedWindows(0),
    lambda: window.FixedWindows(-5),
    lambda: window.Sessions("x"),
    lambda: window.Sessions(0),
    lambda: window.SlidingWindows(10, 0),
    lambda: window.SlidingWindows(-1, 5),
], ids=["fixed0", "fixed-5", "sessions-str", "sessions0", "sliding-period0", "sliding-size-1"])
def test_invalid_window_fns_raise(make):
    with pytest.raises(InvalidArgumentError):
        make()


def test_window_into_a_window_fn_class_raises():
    with pytest.raises(InvalidArgumentError):
        beam.WindowInto(window.FixedWindows)


def test_create_of_a_string_raises():
    with pytest.raises(InvalidArgumentError):
        beam.Create("abc")


def test_combinefn_class_instead_of_instance_raises():
    class SumFn(beam.CombineFn):
        pass

    with pytest.raises(InvalidArgumentError):
        beam.CombinePerKey(SumFn)


def test_flatten_of_incompatible_windowing_raises(make_pipeline):
    p = make_pipeline()
    a = p | "A" >> beam.Create([1]) | "WA" >> beam.WindowInto(window.FixedWindows(10))
    b = p | "B" >> beam.Create([2]) | "WB" >> beam.WindowInto(window.FixedWindows(20))
    with pytest.raises(PipelineConstructionError):
        (a, b) | beam.Flatten()



# ---------------------------------------------------------------------------------------
# run-time errors


class PlainKey:
    """A key type with no deterministic encoding (identity-based equality and hash)."""

    def __init__(self, x):
        self.x = x


@pytest.mark.parametrize("make_grouping", [
    lambda: beam.GroupByKey(),
    lambda: beam.CombinePerKey(sum),
], ids=["GroupByKey", "CombinePerKey"])
def test_non_deterministic_key_is_rejected(make_pipeline, make_grouping):
    p = make_pipeline()
    (p | beam.Create([1, 2]) | beam.Map(lambda x: (PlainKey(x), x))
     | "GroupByPlainKey" >> make_grouping())
    with pytest.raises(errors.HeadraceError) as info:
        p.run()
    assert "deterministic" in str(info.value)
    assert "GroupByPlainKey" in str(info.value)


def test_emitting_to_an_undeclared_tag_fails(make_pipeline):
    p = make_pipeline(max_bundle_attempts=1)
    p | beam.Create([1]) | "Emit" >> beam.FlatMap(lambda x: [beam.pvalue.TaggedOutput("nope", x)])
    with pytest.raises(PipelineExecutionError) as info:
        p.run()
    assert "nope" in str(info.value)


def test_partition_function_out_of_range_fails(make_pipeline):
    p = make_pipeline(max_bundle_attempts=1)
    p | beam.Create([1]) | "Split" >> beam.Partition(lambda x, n: n, 2)
    with pytest.raises(PipelineExecutionError):
        p.run()


def test_user_exception_fails_pipeline_naming_step_and_element(make_pipeline):
    p = make_pipeline(max_bundle_attempts=2)
    p | beam.Create([{"id": 7}]) | "Lookup" >> beam.Map(lambda d: d["missing"])
    with pytest.raises(PipelineExecutionError) as info:
        p.run()
    assert "Lookup" in str(info.value)
    assert repr({"id": 7}) in str(info.value)
    assert "KeyError" in str(info.value)


class _UnsplittableSource(beam.io.iobase.BoundedSource):
    """A bounded source whose split fails (a listing that cannot be made, say)."""

    def split(self, desired_parallelism):
        raise OSError("cannot list the input")

    def read(self, part):
        return iter(())


def test_a_source_that_cannot_be_split_fails_naming_the_step_and_the_source(make_pipeline):
    p = make_pipeline()
    p | "ReadLogs" >> beam.io.Read(_UnsplittableSource()) | beam.Map(lambda x: x)
    with pytest.raises(PipelineExecutionError) as info:
        p.run()
    assert info.value.step == "ReadLogs"
    assert str(info.value) == ("step 'ReadLogs': splitting _UnsplittableSource failed: "
                               "OSError: cannot list the input")


# ---------------------------------------------------------------------------------------
# with_exception_handling: dead-letter outputs


def _error_of(fn, x):
    """What fn(x) raises, computed directly (for the expected dead-letter contents)."""
    try:
        fn(x)
    except Exception as exc:  # noqa: BLE001
        return exc
    raise AssertionError(f"{x!r} does not fail")


def _describe_bad(bad_pcoll):
    return bad_pcoll | "DescribeBad" >> beam.Map(
        lambda b: (b[0], b[1][0], b[1][1], b[1].step))


def test_map_with_exception_handling(make_pipeline):
    values = [1, 0, 2, 0, 5, 4]

    def tenth(x):
        return 10 // x

    with make_pipeline(bundle_size=2) as p:
        good, bad = p | beam.Create(values) | "Divide" >> beam.Map(tenth).with_exception_handling()
        assert_that(good, equal_to([10 // x for x in values if x != 0]), label="good")
        err = _error_of(tenth, 0)
        assert_that(_describe_bad(bad),
                    equal_to([(0, type(err), repr(err), "Divide") for x in values if x == 0]),
                    label="bad")
        both = (good, bad) | beam.Flatten() | beam.combiners.Count.Globally()
        assert_that(both, equal_to([len(values)]), label="nothing_dropped")


def test_flatmap_with_exception_handling(make_pipeline):
    values = ["1,2", "x", "3", "4,y"]

    def parse(s):
        return [int(part) for part in s.split(",")]

    with make_pipeline() as p:
        good, bad = p | beam.Create(values) | "Parse" >> beam.FlatMap(parse).with_exception_handling()
        ok = [v for v in values if all(part.isdigit() for part in v.split(","))]
        assert_that(good, equal_to([n for v in ok for n in parse(v)]), label="good")
        expected_bad = []
        for v in values:
            if v not in ok:
                err = _error_of(parse, v)
                expected_bad.append((v, type(err), repr(err), "Parse"))
        # a failing element contributes no partial output ("4,y" yields no 4)
        assert_that(_describe_bad(bad), equal_to(expected_bad), label="bad")


class Reciprocal(beam.DoFn):
    def process(self, x):
        yield 1 / x


def test_pardo_with_exception_handling_and_custom_tags(make_pipeline):
    values = [1, 0, 4, -2, 0]
    with make_pipeline() as p:
        res = (p | beam.Create(values)
               | "Recip" >> beam.ParDo(Reciprocal()).with_exception_handling(
                   main_tag="ok", dead_letter_tag="failed"))
        assert_that(res.ok, equal_to([1 / x for x in values if x]), label="ok")
        err = _error_of(lambda x: 1 / x, 0)
        assert_that(_describe_bad(res.failed),
                    equal_to([(0, type(err), repr(err), "Recip") for x in values if not x]),
                    label="failed")


def test_exception_handling_only_catches_exc_class(make_pipeline):
    def f(x):
        if x == 0:
            raise ZeroDivisionError("zero")
        if x < 0:
            raise KeyError("negative")
        return x

    p = make_pipeline(max_bundle_attempts=1)
    good, bad = (p | beam.Create([1, 0, -1])
                 | "OnlyZero" >> beam.Map(f).with_exception_handling(exc_class=ZeroDivisionError))
    with pytest.raises(PipelineExecutionError) as info:
        p.run()
    assert "OnlyZero" in str(info.value)
    assert "KeyError" in str(info.value)


def test_exception_handling_error_info_has_traceback_lines(make_pipeline):
    def boom(x):
        raise ValueError(f"boom {x}")

    with make_pipeline() as p:
        _, bad = p | beam.Create([3]) | "Boom" >> beam.Map(boom).with_exception_handling()
        described = bad | beam.Map(lambda b: (b[0], any("boom" in line for line in b[1][2])))
        assert_that(described, equal_to([(3, True)]))


@pytest.mark.parametrize("bad", [1e20, float("nan"), float("inf"), -(10**14)])
def test_out_of_range_or_non_finite_timestamps_are_rejected(bad):
    with pytest.raises(InvalidArgumentError, match="seconds"):
        window.TimestampedValue("x", bad)
    with pytest.raises(InvalidArgumentError):
        Timestamp(bad)


def test_a_dofn_emitting_an_out_of_range_timestamp_fails_naming_the_step(make_pipeline):
    with pytest.raises(PipelineExecutionError, match="Stamp.*outside"):
        with make_pipeline() as p:
            _ = (p | beam.Create([1])
                 | "Stamp" >> beam.Map(lambda x: window.TimestampedValue(x, 1.6e15)))  # micros
