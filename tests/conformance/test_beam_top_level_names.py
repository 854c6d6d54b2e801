"""Beam's top-level names that ported programs use: GroupIntoBatches, TimeDomain, Windowing,
Read, Impulse, FlattenWith and PartitionFn, each with Beam's behaviour, on every runner."""

from __future__ import annotations

import pytest

import headrace as beam
from headrace.errors import InvalidArgumentError, PipelineConstructionError
from headrace.testing.util import assert_that, equal_to
from headrace.transforms import userstate, util
from headrace.transforms import window as W


def test_the_names_are_the_ones_of_their_modules():
    assert beam.GroupIntoBatches is util.GroupIntoBatches is beam.transforms.GroupIntoBatches
    assert beam.TimeDomain is userstate.TimeDomain
    assert beam.Windowing is beam.transforms.core.Windowing
    assert beam.Read is beam.io.Read
    assert beam.Impulse is beam.transforms.core.Impulse


def test_impulse_is_one_empty_bytes_element_at_the_minimum_timestamp(make_pipeline):
    with make_pipeline() as p:
        out = (p | beam.Impulse()
               | beam.Map(lambda x, ts=beam.DoFn.TimestampParam, w=beam.DoFn.WindowParam:
                          (x, ts == W.MIN_TIMESTAMP, isinstance(w, W.GlobalWindow))))
        assert_that(out, equal_to([(b"", True, True)]))


def test_impulse_is_a_root_transform():
    p = beam.Pipeline()
    pc = p | beam.Create([1])
    with pytest.raises(PipelineConstructionError, match="root transform"):
        pc | beam.Impulse()


def test_flatten_with_pcollections_and_root_transforms(make_pipeline):
    with make_pipeline() as p:
        a = p | "A" >> beam.Create([1, 2])
        b = p | "B" >> beam.Create([3])
        out = a | beam.FlattenWith(b, beam.Create([4, 5])) | beam.Map(lambda x: x * 10)
        assert_that(out, equal_to([10, 20, 30, 40, 50]))


def test_flatten_with_refuses_other_values():
    with pytest.raises(InvalidArgumentError, match="FlattenWith takes PCollections"):
        beam.FlattenWith([1, 2])


class _ByParity(beam.PartitionFn):
    """Even values to partition 0, odd ones to 1, shifted by an extra argument."""

    def partition_for(self, element, num_partitions, offset):
        return (element + offset) % num_partitions


def test_partition_with_a_partition_fn(make_pipeline):
    with make_pipeline() as p:
        evens, odds = p | beam.Create(range(7)) | beam.Partition(_ByParity(), 2, 0)
        assert_that(evens, equal_to([0, 2, 4, 6]), label="Evens")
        assert_that(odds, equal_to([1, 3, 5]), label="Odds")


def test_a_partition_fn_without_partition_for_fails_naming_it(make_pipeline):
    with pytest.raises(Exception, match="must define partition_for"):
        with make_pipeline() as p:
            p | beam.Create([1]) | beam.Partition(beam.PartitionFn(), 2)


def test_group_into_batches_by_its_top_level_name(make_pipeline):
    with make_pipeline() as p:
        out = (p | beam.Create([("k", i) for i in range(5)])
               | beam.GroupIntoBatches(2)
               | beam.Map(lambda kv: len(kv[1])))
        assert_that(out, equal_to([2, 2, 1]))
