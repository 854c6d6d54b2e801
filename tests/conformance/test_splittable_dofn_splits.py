"""Splittable DoFns on the local runner, through the public API (Beam's names).

An SDF reads `OffsetRange(0, n)` for each element on the local runner, outputting (element,
position) for every position it claims. However the runner splits the restrictions while they
are read (`--sdf_test_split_probability`, at random fractions after claims), however the provider splits
them initially, and however often the DoFn checkpoints itself (`defer_remainder` every k claims),
the output is every (element, position) exactly once.
"""

from __future__ import annotations

from typing import Optional

import pytest
from hypothesis import given, settings, strategies as st

import headrace as beam
from headrace.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
from headrace.io.watermark_estimators import ManualWatermarkEstimator
from headrace.metrics import Metrics
from headrace.options.pipeline_options import PipelineOptions
from headrace.testing.util import assert_that, equal_to
from headrace.transforms.core import RestrictionProvider
from tests._support import counter_value


class _Positions(RestrictionProvider):
    """Element (name, n): the positions [0, n), initially split into parts of `part` positions."""

    def __init__(self, part: Optional[int] = None) -> None:
        self.part = part

    def initial_restriction(self, element):
        return OffsetRange(0, element[1])

    def create_tracker(self, restriction):
        return OffsetRestrictionTracker(restriction)

    def restriction_size(self, element, restriction):
        return restriction.size()

    def split(self, element, restriction):
        if self.part is None:
            yield restriction
        else:
            yield from restriction.split(self.part)


class _ReadPositions(beam.DoFn):
    """Outputs (name, position) per claimed position; checkpoints every `every` claims."""

    def __init__(self, provider: _Positions, every: Optional[int] = None) -> None:
        self.every = every
        self.provider = provider

    def process(self, element, tracker=beam.DoFn.RestrictionParam()):
        Metrics.counter("sdf", "process_calls").inc()
        position = tracker.current_restriction().start
        claims = 0
        while tracker.try_claim(position):
            yield element[0], position
            position += 1
            claims += 1
            if self.every is not None and claims == self.every:
                tracker.defer_remainder()
                return


def _reader(provider: _Positions, every: Optional[int]) -> beam.DoFn:
    """`_ReadPositions` with `provider` as its DoFn.RestrictionParam's provider."""

    class Reader(_ReadPositions):
        def process(self, element, tracker=beam.DoFn.RestrictionParam(provider)):
            return super().process(element, tracker)
    return Reader(provider, every)


def _run(elements, probability: float, seed: int, every: Optional[int], part: Optional[int]):
    options = PipelineOptions(sdf_test_split_probability=probability, sdf_test_split_seed=seed)
    p = beam.Pipeline(runner="LocalRunner", options=options)
    out = (p | beam.Create(elements)
           | beam.ParDo(_reader(_Positions(part), every)))
    assert_that(out, equal_to([(name, i) for name, n in elements for i in range(n)]))
    result = p.run()
    result.wait_until_finish()
    return result


@settings(max_examples=25, deadline=None)
@given(sizes=st.lists(st.integers(min_value=0, max_value=40), max_size=5),
       probability=st.sampled_from([0.3, 0.9]), seed=st.integers(min_value=0, max_value=10**6),
       every=st.sampled_from([None, 1, 2, 5]), part=st.sampled_from([None, 1, 4, 16]))
def test_every_position_of_every_element_is_output_exactly_once(sizes, probability, seed, every,
                                                                part):
    _run([(f"e{i}", n) for i, n in enumerate(sizes)], probability, seed, every, part)


@pytest.mark.parametrize("probability", [0.3, 0.9])
def test_runner_splits_do_happen(probability):
    elements = [("a", 200), ("b", 150)]
    result = _run(elements, probability, seed=7, every=None, part=None)
    # each runner split leaves a residual that needs a process call of its own
    assert counter_value(result, "process_calls") > len(elements)
    quiet = _run(elements, 0.0, seed=7, every=None, part=None)
    assert counter_value(quiet, "process_calls") == len(elements)


def test_checkpoints_every_k_claims_resume_where_they_stopped():
    elements = [("a", 10), ("b", 0), ("c", 7)]
    result = _run(elements, 0.0, seed=0, every=3, part=None)
    # a call per 3 claims, plus one whose claim fails at the stop (after a checkpoint at the
    # stop the residual is empty, so no call)
    expected = sum(n // 3 + (1 if n % 3 or n == 0 else 0) for _, n in elements)
    assert counter_value(result, "process_calls") == expected


class _SelfProvided(beam.DoFn, RestrictionProvider):
    """A DoFn that is its own RestrictionProvider, with a manual watermark per position."""

    def initial_restriction(self, element):
        return OffsetRange(0, element)

    def create_tracker(self, restriction):
        return OffsetRestrictionTracker(restriction)

    def restriction_size(self, element, restriction):
        return restriction.size()

    def process(self, element, tracker=beam.DoFn.RestrictionParam(),
                watermark=beam.DoFn.WatermarkEstimatorParam(
                    ManualWatermarkEstimator.default_provider())):
        position = tracker.current_restriction().start
        while tracker.try_claim(position):
            watermark.set_watermark(beam.utils.timestamp.Timestamp.of(position))
            yield beam.window.TimestampedValue((element, position), position)
            position += 1


def test_a_dofn_that_is_its_own_provider_with_a_manual_watermark():
    options = PipelineOptions(sdf_test_split_probability=0.5, sdf_test_split_seed=3)
    with beam.Pipeline(runner="LocalRunner", options=options) as p:
        out = (p | beam.Create([5, 12])
               | beam.ParDo(_SelfProvided())
               | beam.WindowInto(beam.window.FixedWindows(4))
               | beam.Map(lambda kv: (kv[0], 1))
               | beam.CombinePerKey(sum))
        # per element n: the positions [0, n) fall into windows of 4 seconds
        expected = [(n, min(4, n - w)) for n in (5, 12) for w in range(0, n, 4)]
        assert_that(out, equal_to([(n, c) for n, c in expected]))


def test_params_refuse_what_is_not_a_provider_with_a_value_error():
    # Beam raises ValueError for both
    with pytest.raises(ValueError, match="RestrictionParam needs a RestrictionProvider"):
        beam.DoFn.RestrictionParam(object())
    with pytest.raises(ValueError, match="WatermarkEstimatorParam needs a WatermarkEstimatorProvider"):
        beam.DoFn.WatermarkEstimatorParam(_Positions())
