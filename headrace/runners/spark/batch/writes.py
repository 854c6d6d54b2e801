"""File sinks on the Spark batch runner: written in the job that computes their input, committed
by the driver from the tasks' results, and without a shard shuffle where none is needed.

A bounded write (`io.filebasedsink.write_files`) is runner-agnostic steps: tasks write temporary
files and output their paths; a finalize step renames the paths its side input lists. Here:

* **The commit** (`file_commit`, `commit_files`): when nothing else reads the list of paths, the
  finalize step runs on the driver after the run's job, from the paths that job's tasks return,
  so no job of its own collects them. It is the commit protocol of Spark's own writers: only a
  successful task attempt's result names its files; a failed or speculative attempt's files are
  deleted with the temporary directory.
* **Shards without a shuffle** (`shards_per_partition`): with `num_shards=N` the write groups its
  elements by a shard number (`AssignShard` -> `GroupByShard` -> `WriteShards`). When the input
  already has exactly N Spark partitions, each partition is one shard instead: the task that
  computes the partition writes it to one temporary file (an empty partition to an empty file),
  with no shuffle and no stage of its own. The shards are then as even as the partitions are
  (Spark's own writers behave the same); with any other partition count the shuffle stays, into
  at most N partitions (no task without a shard to write).
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, NamedTuple, Optional

from headrace.metrics.metric import MetricsContainer
from headrace.model.window import GLOBAL_WINDOWS_TUPLE, GlobalWindow
from headrace.model.windowed import WindowedValue
from headrace.pipeline.pipeline import AppliedPTransform
from headrace.pipeline.pvalue import PCollection
from headrace.runners.kit import plan as planning
from headrace.runners.kit.sources import to_windowed_value
from headrace.runners.spark.batch.env import TaskEnv
from headrace.runners.spark.worker.sides import portable_views, side_reader, stage_arguments
from headrace.transforms.core import Create

_END_OF_GLOBAL = GlobalWindow().max_timestamp().micros


class FileCommit(NamedTuple):
    """A file sink's finalize step, run on the driver after the run's job (`file_commit`)."""

    stage: Any           # its FusedStage (the one _FinalizeDoFn step)
    values: List[Any]    # the values of the Create that triggers it (one None)
    paths: Any           # the RDD of the temporary files' paths the tasks wrote


def file_commit(stage: planning.Stage, uses: Dict[PCollection, int],
                rdds: Dict[PCollection, Any]) -> Optional[FileCommit]:
    """A file sink's finalize step (`filebasedsink._FinalizeDoFn`) to run on the driver after the
    run's job (see the module doc), when nothing else reads its list of paths or its output."""
    from headrace.io.filebasedsink import _FinalizeDoFn
    if len(stage.nodes) != 1 or len(stage.side_pcolls) != 1:
        return None
    node = stage.nodes[0]
    fn = getattr(node.transform, "fn", None)
    trigger = stage.root.producer
    paths = stage.side_pcolls[0]
    if (not isinstance(fn, _FinalizeDoFn) or trigger is None
            or not isinstance(trigger.transform, Create) or uses.get(paths) != 1
            or any(pc.consumers for pc in stage.outputs) or paths not in rdds):
        return None
    portable, _ = portable_views(stage.side_inputs)
    return FileCommit(stage.fused(lambda view: portable[id(view)]),
                      list(trigger.transform.values), rdds[paths])


def commit_files(env: TaskEnv, commits: List[FileCommit], paths: List[Dict[Any, list]]) -> None:
    """Runs each file sink's finalize step on the driver with the paths its tasks returned
    (`paths[i]`: commit i's, {window: [paths]}), as any stage runs a bundle."""
    for c, contents in zip(commits, paths):
        reader = side_reader({0: contents}, stage_arguments(c.stage))
        committed, attempted = MetricsContainer(), MetricsContainer()
        try:
            c.stage.process_bundle([to_windowed_value(v) for v in c.values], reader,
                                   env.max_attempts, committed, attempted)
            c.stage.finalize_bundles()
        finally:
            c.stage.teardown()
        env.report(committed, attempted)


def _fn(node: Optional[AppliedPTransform]) -> Any:
    return getattr(node.transform, "fn", None) if node is not None else None


def shard_count(node: AppliedPTransform) -> Optional[int]:
    """N when `node` is a bounded file sink's GroupByShard (input from its AssignShard, output
    read by its WriteShards alone), else None."""
    from headrace.io.filebasedsink import _AssignShardDoFn, _WriteShardDoFn
    assign = _fn(node.inputs[0].producer) if node.inputs else None
    out = node.outputs.get(None)
    if not isinstance(assign, _AssignShardDoFn) or out is None or len(out.consumers) != 1:
        return None
    return assign.n if isinstance(_fn(out.consumers[0]), _WriteShardDoFn) else None


def shards_per_partition(node: AppliedPTransform, upstream: Any) -> Optional[Any]:
    """The output RDD of a GroupByShard `node` over `upstream` (its input's RDD of elements, or
    None when the producing stage made shuffle records) when its input has as many partitions as
    shards: one (index, values) element per partition, no shuffle (see the module doc); else
    None (and for any other grouping)."""
    n = shard_count(node)
    if n is None or upstream is None or upstream.getNumPartitions() != n:
        return None
    return upstream.mapPartitionsWithIndex(_one_shard)


def shuffle_partitions(node: AppliedPTransform, parallelism: int) -> int:
    """The partitions of a grouping's shuffle: at most N for a GroupByShard (N shards, so no
    task is left without a shard to write), else `parallelism`."""
    n = shard_count(node)
    return parallelism if n is None else max(1, min(n, parallelism))


def _one_shard(index: int, it: Iterator[WindowedValue]) -> Iterator[WindowedValue]:
    """A partition of AssignShard's (shard, value) elements as one shard: (index, [values]) in
    the global window, as GroupByShard outputs it. The values are a list, as GroupByShard's
    are, so that WriteShards can retry its bundle (`max_bundle_attempts`)."""
    yield WindowedValue((index, [wv.value[1] for wv in it]), _END_OF_GLOBAL, GLOBAL_WINDOWS_TUPLE)
