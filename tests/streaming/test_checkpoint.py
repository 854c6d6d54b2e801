"""A streaming run's checkpoint location: kept where the user says, refused to another pipeline."""

from __future__ import annotations

import pytest

import headrace as beam
from headrace.errors import PipelineExecutionError
from headrace.testing import TestStream
from headrace.testing.util import assert_that, equal_to
from headrace.transforms import window

TV = beam.TimestampedValue


def _sums(p, label="Sum"):
    stream = (TestStream().add_elements([TV(("a", 1), 1), TV(("a", 2), 2), TV(("b", 5), 3)])
              .advance_watermark_to(20))
    return (p | stream | beam.WindowInto(window.FixedWindows(10)) | label >> beam.CombinePerKey(sum))


def test_a_checkpoint_is_kept_at_its_location_and_refused_to_another_pipeline(
        runner, make_pipeline, tmp_path):
    if runner == "LocalRunner":
        pytest.skip("checkpoints are the Spark streaming runner's")
    where = tmp_path / "ckpt"
    p = make_pipeline(checkpoint_location=str(where))
    assert_that(_sums(p), equal_to([("a", 3), ("b", 5)]))
    assert p.run().wait_until_finish() == beam.PipelineState.DONE
    assert (where / "headrace" / "plan.pkl").exists() and (where / "spark" / "offsets").is_dir()

    other = make_pipeline(checkpoint_location=str(where))
    _sums(other, label="SumPerUser")
    with pytest.raises(PipelineExecutionError, match=r"written by another pipeline.*SumPerUser"):
        other.run()
