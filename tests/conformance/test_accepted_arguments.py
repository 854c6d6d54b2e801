"""Arguments the public API accepts do what they do in Beam, or are refused with an error naming them.

Covers the core transforms (CombineValues / CombineGlobally extra arguments, side inputs given
to combines, Flatten, ParDo.with_outputs, Reshuffle), type hints (`with_input_types`,
--no_pipeline_type_check), TestStream's coder, TestPipeline and the pipeline options headrace
cannot honour. Text I/O and with_exception_handling have their own files.
"""

from __future__ import annotations

import json
import typing

import pytest

import headrace as beam
from headrace.errors import (
    InvalidArgumentError, PipelineConstructionError, UnsupportedArgumentError,
)
from headrace.options.pipeline_options import PipelineOptions
from headrace.testing.test_pipeline import TestPipeline
from headrace.testing.test_stream import TestStream, TestStreamError
from headrace.testing.util import assert_that, equal_to


def _scaled_sum(values, factor, offset=0):
    return sum(values) * factor + offset


# ---- combines ----------------------------------------------------------------------------------


def test_combine_values_passes_its_extra_arguments(make_pipeline):
    groups = [("a", [1, 2, 3]), ("b", [10]), ("c", [])]
    with make_pipeline() as p:
        out = p | beam.Create(groups) | beam.CombineValues(_scaled_sum, 3, offset=1)
        assert_that(out, equal_to([(k, _scaled_sum(v, 3, offset=1)) for k, v in groups]))


def test_combine_values_reads_side_inputs(make_pipeline):
    groups = [("a", [1, 2]), ("b", [5])]
    factor = 7
    with make_pipeline() as p:
        side = p | "Factor" >> beam.Create([factor])
        out = (p | beam.Create(groups)
               | beam.CombineValues(_scaled_sum, beam.pvalue.AsSingleton(side)))
        assert_that(out, equal_to([(k, _scaled_sum(v, factor)) for k, v in groups]))


def test_combine_globally_default_uses_the_extra_arguments(make_pipeline):
    with make_pipeline() as p:
        empty = p | "Empty" >> beam.Create([])
        out = empty | beam.CombineGlobally(_scaled_sum, 2, offset=5)
        assert_that(out, equal_to([_scaled_sum([], 2, offset=5)]), label="default")
        view = (p | "Some" >> beam.Create([]) | "AsView" >> beam.CombineGlobally(
            _scaled_sum, 2, offset=9).as_singleton_view())
        read = p | "One" >> beam.Create([0]) | beam.Map(lambda _, v: v, view)
        assert_that(read, equal_to([_scaled_sum([], 2, offset=9)]), label="view_default")


# ---- Flatten, with_outputs, Reshuffle ----------------------------------------------------------


def test_flatten_refuses_unknown_keyword_arguments():
    with pytest.raises(InvalidArgumentError, match="label_prefix"):
        beam.Flatten(label_prefix="x")


def test_with_outputs_takes_allow_unknown_tags():
    fn = beam.ParDo(beam.DoFn())
    assert fn.with_outputs("a", allow_unknown_tags=True).dynamic_outputs
    assert fn.with_outputs().dynamic_outputs and not fn.with_outputs("a").dynamic_outputs
    assert not fn.with_outputs(allow_unknown_tags=False).dynamic_outputs


@pytest.mark.parametrize("buckets", [0, -1, 1.5, True])
def test_reshuffle_refuses_a_bad_num_buckets(buckets):
    with pytest.raises(InvalidArgumentError, match="num_buckets"):
        beam.Reshuffle(num_buckets=buckets)


@pytest.mark.parametrize("buckets", [1, 3])
def test_reshuffle_with_num_buckets_keeps_every_element(make_pipeline, buckets):
    values = list(range(50))
    with make_pipeline(bundle_size=7) as p:
        out = p | beam.Create(values) | beam.Reshuffle(num_buckets=buckets)
        assert_that(out, equal_to(values))


# ---- type hints --------------------------------------------------------------------------------


def test_with_input_types_rejects_a_known_mismatch(make_pipeline):
    p = make_pipeline()
    words = p | beam.Create(["a", "b"])
    with pytest.raises(PipelineConstructionError, match=r"Lengths.*with_input_types"):
        words | "Lengths" >> beam.Map(len).with_input_types(int)
    with pytest.raises(PipelineConstructionError, match=r"Pairs.*with_input_types"):
        words | "Pairs" >> beam.MapTuple(lambda k, v: v).with_input_types(typing.Tuple[str, int])
    ok = words | "Upper" >> beam.Map(str.upper).with_input_types(str)
    assert_that(ok, equal_to(["A", "B"]))
    p.run()


def test_with_input_types_refuses_side_input_hints():
    with pytest.raises(UnsupportedArgumentError, match="side inputs"):
        beam.Map(lambda x, y: x).with_input_types(int, int)


def test_no_pipeline_type_check_turns_construction_checks_off(make_pipeline):
    p = beam.Pipeline(options=PipelineOptions(["--no_pipeline_type_check"]))
    words = p | beam.Create(["a", "b"])
    words | "Lengths" >> beam.Map(len).with_input_types(int)  # not checked
    words | "Group" >> beam.GroupByKey()  # not checked either (would fail when run)
    strict = make_pipeline()
    with pytest.raises(PipelineConstructionError, match="Group"):
        strict | beam.Create(["a"]) | "Group" >> beam.GroupByKey()


# ---- TestStream coder --------------------------------------------------------------------------


class JsonCoder(beam.coders.Coder):
    def encode(self, value):
        return json.dumps(value).encode("utf-8")

    def decode(self, encoded):
        return json.loads(encoded)


def test_test_stream_round_trips_elements_through_its_coder(make_pipeline):
    elements = [("a", 1), {"k": (2, 3)}]
    expected = [json.loads(json.dumps(e)) for e in elements]  # tuples come back as lists
    assert expected != elements
    stream = TestStream(coder=JsonCoder()).add_elements(elements).advance_watermark_to_infinity()
    assert [repr(e) for e in expected] != [repr(e) for e in elements]
    with make_pipeline() as p:
        assert_that(p | stream | beam.Map(repr), equal_to([repr(e) for e in expected]))


def test_test_stream_coder_must_fit_the_elements():
    with pytest.raises(TestStreamError, match="coder"):
        TestStream(coder=object())
    with pytest.raises(TestStreamError, match="StrUtf8Coder"):
        TestStream(coder=beam.coders.StrUtf8Coder()).add_elements([1])


# ---- TestPipeline ------------------------------------------------------------------------------


def test_test_pipeline_reads_test_pipeline_options(runner_flags):
    argv = ["pytest", "-q", "--test-pipeline-options=" + " ".join(runner_flags + ["--bundle_size=3"])]
    p = TestPipeline(argv=argv, additional_pipeline_args=["--max_bundle_attempts=2"])
    assert p.options_list == runner_flags + ["--bundle_size=3", "--max_bundle_attempts=2"]
    assert (p.options.bundle_size, p.options.max_bundle_attempts) == (3, 2)
    assert p.options.runner == runner_flags[0].split("=", 1)[1]
    with p:
        assert_that(p | beam.Create([1, 2]) | beam.Map(lambda x: x * 2), equal_to([2, 4]))


def test_test_pipeline_integration_test_is_skipped_without_options():
    import unittest
    with pytest.raises(unittest.SkipTest, match="test-pipeline-options"):
        TestPipeline(argv=["pytest"], is_integration_test=True)
    assert TestPipeline(argv=["x", "--test-pipeline-options=--bundle_size=4"],
                        is_integration_test=True).options.bundle_size == 4


def test_test_pipeline_blocking_asserts_the_result(monkeypatch):
    from headrace.pipeline import pipeline as pipeline_module

    p = TestPipeline(runner="LocalRunner", argv=[])
    p | beam.Create([1])
    monkeypatch.setattr(pipeline_module.PipelineResult, "wait_until_finish",
                        lambda self, duration=None: beam.PipelineState.FAILED)
    with pytest.raises(AssertionError, match="FAILED"):
        p.run()
    q = TestPipeline(runner="LocalRunner", argv=[], blocking=False)
    q | beam.Create([1])
    assert q.run().state == beam.PipelineState.DONE


def test_test_pipeline_refuses_display_data():
    with pytest.raises(UnsupportedArgumentError, match="display_data"):
        TestPipeline(argv=[], display_data={"owner": "me"})


# ---- pipeline options headrace cannot honour ---------------------------------------------------


@pytest.mark.parametrize("flag, name", [
    ("--requirements_file=requirements.txt", "requirements_file"),
    ("--setup_file=./setup.py", "setup_file"),
    ("--pickle_library=dill", "pickle_library"),
    ("--runtime_type_check", "runtime_type_check"),
    ("--direct_running_mode=in_parallel", "direct_running_mode"),
    ("--direct_num_workers=-2", "direct_num_workers"),
])
def test_unsupported_option_values_are_refused_when_the_pipeline_runs(runner_flags, flag, name):
    p = beam.Pipeline(argv=[*runner_flags, flag])
    p | beam.Create([1])
    with pytest.raises(InvalidArgumentError, match=name):
        p.run()


def test_streaming_option_runs_a_bounded_pipeline_with_the_same_result(runner, runner_flags):
    # --streaming: the Spark runner runs the pipeline as a Structured Streaming query (the
    # local runner runs bounded and unbounded pipelines alike)
    p = beam.Pipeline(argv=[*runner_flags, "--streaming"])
    assert_that(p | beam.Create([1, 2, 3]) | beam.Map(lambda x: ("k", x)) | beam.CombinePerKey(sum),
                equal_to([("k", 6)]))
    result = p.run()
    assert result.wait_until_finish() == beam.PipelineState.DONE
