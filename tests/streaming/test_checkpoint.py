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


def test_a_resumed_query_keeps_the_test_stream_chunking_its_state_was_written_with(
        runner, make_pipeline, tmp_path, capfd):
    """Whether a grouping after a TestStream keeps lifted accumulators or elements depends on
    --test_stream_events_per_batch (1: lifted; more: the chunk's steps one by one), so a query
    resumed from its checkpoint keeps the value it started with, and says so."""
    if runner == "LocalRunner":
        pytest.skip("checkpoints are the Spark streaming runner's")
    where = tmp_path / "ckpt"
    p = make_pipeline(checkpoint_location=str(where), test_stream_events_per_batch=1)
    _sums(p)
    assert p.run().wait_until_finish() == beam.PipelineState.DONE
    assert "keeps --test_stream_events_per_batch" not in capfd.readouterr().err

    again = make_pipeline(checkpoint_location=str(where), test_stream_events_per_batch=50)
    _sums(again)
    assert again.run().wait_until_finish() == beam.PipelineState.DONE
    assert ("the resumed query keeps --test_stream_events_per_batch=1 (given 50)"
            in capfd.readouterr().err)


@pytest.mark.parametrize("stale", [
    b"cheadrace.runners.spark.streaming.gone_module\nStreamPlan\n.",   # a module that moved
    b"cheadrace.runners.spark.streaming.plan\nGoneStreamPlan\n.",      # a class that moved
])
def test_a_plan_of_another_headrace_version_is_refused_with_the_fresh_checkpoint_advice(tmp_path, stale):
    """A plan whose headrace classes moved (another state layout) does not unpickle: the error
    names the checkpoint and says to start from a fresh one, instead of a bare unpickling error.
    (The stored bytes are protocol-0 pickles of a global that this version does not have.)"""
    from headrace.runners.spark.streaming.checkpoint import RunFiles

    files = RunFiles(str(tmp_path))
    files.write_plan({"shape": []})
    with open(files.plan_path, "wb") as fh:
        fh.write(stale)
    with pytest.raises(PipelineExecutionError) as info:
        files.read_plan()
    assert f"the streaming checkpoint at {tmp_path} was written by another version of headrace" in str(
        info.value)
    assert "give this pipeline a new --checkpoint_location" in str(info.value)


def test_a_plan_needing_a_module_of_the_users_that_is_missing_stays_an_import_error(tmp_path):
    from headrace.runners.spark.streaming.checkpoint import RunFiles

    files = RunFiles(str(tmp_path))
    files.write_plan({"shape": []})
    with open(files.plan_path, "wb") as fh:
        fh.write(b"cusers_module_not_installed\nparse\n.")
    with pytest.raises(ImportError, match="users_module_not_installed"):
        files.read_plan()


def test_a_replayed_micro_batch_records_its_panes_once(runner, make_pipeline, tmp_path):
    """Spark replays a micro-batch whose commit it did not write (a driver that died after the
    batch ran): the replay's tasks write the same pane recording, which replaces what the first
    run wrote instead of adding to it."""
    if runner == "LocalRunner":
        pytest.skip("checkpoints are the Spark streaming runner's")
    from headrace.diagram.recording import read_panes

    where, rec = tmp_path / "ckpt", str(tmp_path / "rec")

    def run():
        p = make_pipeline(checkpoint_location=str(where), record_panes=rec,
                          test_stream_events_per_batch=1)
        assert_that(_sums(p), equal_to([("a", 3), ("b", 5)]))
        assert p.run().wait_until_finish() == beam.PipelineState.DONE

    def rows():
        return sorted(repr(sorted((k, v) for k, v in r.items() if k != "seq"))
                      for r in read_panes(rec).to_pylist())

    run()
    first = rows()
    assert sum("('kind', 'pane')" in r and "('step', 'Sum')" in r for r in first) == 2, first
    def committed():
        return sorted(int(f.name) for f in (where / "spark" / "commits").iterdir()
                      if f.name.isdigit())

    last = committed()[-1]   # the last batch (it fired the panes) ran but did not commit
    (where / "spark" / "commits" / str(last)).unlink()
    (where / "spark" / "commits" / f".{last}.crc").unlink(missing_ok=True)
    run()
    assert committed()[-1] == last
    assert rows() == first
