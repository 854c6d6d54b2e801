"""The Spark streaming runner: an unbounded pipeline as one Structured Streaming query.

The query (`query`): one headrace source reading every source of the pipeline, then levels of
element-wise functions (mapInArrow) and stateful operators (transformWithState), then a
foreachBatch sink; a grouping's level is one more than the level its input is made at, a
stage's or a Flatten's is its inputs' (`plan`). All PCollections travel in one multiplexed
stream of rows (`rows`), so a PCollection read by several branches is computed once. The
watermarks and the batch schedule are the coordinator's (`coordinator`), not Spark's: Spark's
watermark is only the clock that wakes keys up (see `coordinator` and `processor`).

State lives in Spark's state store (RocksDB provider), offsets and the driver's per-batch state
under the checkpoint location, so a restarted query replays an unfinished batch exactly.

The query is built only from APIs that Spark Connect serves as well (DataFrame operations, a
Python data source, mapInArrow, transformWithState, foreachBatch; no SparkContext, no RDDs),
so it runs the same on a classic session and on a Spark Connect one (`--spark_remote`).
"""

from __future__ import annotations

import functools
import os
import sys
import tempfile
import zlib
from typing import Any, Optional, Tuple

from headrace.options.pipeline_options import LocalRunnerOptions, SparkRunnerOptions
from headrace.pipeline.pipeline import Pipeline
from headrace.runners.kit.plan import Kind
from headrace.diagram.recording import RecordPanes
from headrace.runners.spark import progress
from headrace.runners.spark import session as sessions
from headrace.runners.spark.streaming import query as queries
from headrace.runners.spark.streaming.checkpoint import RunFiles
from headrace.runners.spark.streaming.errors import build_error, check_connect_checkpoint, check_restart
from headrace.runners.spark.streaming.plan import build_plan
from headrace.runners.spark.streaming.result import (
    BatchLines, StreamingPipelineResult, source_step_watermarks)
from headrace.utils.secrets import left_out


class SparkStreamingRunner:
    """Runs an unbounded pipeline as one Spark Structured Streaming query (see the module doc)."""

    def __init__(self, spark: Any) -> None:
        self.spark = spark

    def run_pipeline(self, pipeline: Pipeline, options: Any) -> StreamingPipelineResult:
        """Builds and starts the query, and runs it to the end of its input (or until cancelled)."""
        spark = self.spark
        so = options.view_as(SparkRunnerOptions)
        lo = options.view_as(LocalRunnerOptions)
        if sessions.is_connect(spark):
            check_connect_checkpoint(spark, so.checkpoint_location)
        checkpoint = so.checkpoint_location or tempfile.mkdtemp(prefix="headrace-stream-")
        checkpoint = os.path.abspath(checkpoint)
        print(f"headrace: streaming query checkpoint at {checkpoint}", file=sys.stderr)
        queries.configure(spark, so.spark_conf)
        files = RunFiles(checkpoint)
        old = files.read_plan() if os.path.exists(files.plan_path) else None
        # a resumed query keeps its partitions (Spark keeps them in the checkpoint)
        n = old.partitions if old is not None else queries.state_partitions(spark, so.state_partitions)
        chunk_events = _chunk_events(old, max(1, int(so.test_stream_events_per_batch)))
        keys = queries.partition_keys(n)
        max_attempts = max(1, int(lo.max_bundle_attempts))
        # the plan (and the steps pickled inside it) holds no credential: see headrace.utils.secrets
        with left_out(f"{zlib.crc32(checkpoint.encode()):08x}") as secrets:
            plan = build_plan(pipeline, max(1, int(lo.bundle_size)), max_attempts,
                              n, keys, max(1, int(so.max_records_per_batch)), _sdf_budget(so),
                              chunk_events, RecordPanes.from_options(options))
            if old is not None:
                check_restart(old, plan, checkpoint)
            files.write_plan(plan)
        try:
            query = queries.start(spark, plan, checkpoint, keys, max_attempts,
                                  float(so.trigger_interval), secrets)
        except Exception as exc:
            explained = build_error(exc, files)
            if explained is None:
                raise
            raise explained from exc
        labels = {g: getattr(spec, "label", str(g)) for level in plan.groupings
                  for g, spec in level.items()}
        sources = functools.partial(source_step_watermarks, plan.coordinator, labels)
        reads = any(node.kind in (Kind.SPLITTABLE, Kind.UNBOUNDED) for node in plan.coordinator.nodes)
        lines = None
        if progress.wanted(options):
            lines = BatchLines(query, files, plan.coordinator.n_groupings, sources, reads)
        result = StreamingPipelineResult(query, files, plan.coordinator.n_groupings, checkpoint,
                                         bool(plan.coordinator.unbounded), lines, labels, sources,
                                         reads)
        result.wait_until_finish()
        return result


def _chunk_events(old: Any, asked: int) -> int:
    """The most TestStream events a micro-batch performs: `asked` (--test_stream_events_per_batch),
    or, for a resumed query, what it started with (its groupings' stored state depends on it:
    a grouping that takes a chunk's steps one by one keeps elements, not lifted accumulators)."""
    if old is None:
        return asked
    kept = old.coordinator.chunks.events
    if kept != asked:
        print(f"headrace: the resumed query keeps --test_stream_events_per_batch={kept} "
              f"(given {asked}): its state was written with it", file=sys.stderr)
    return int(kept)


def _sdf_budget(so: Any) -> Tuple[Optional[int], Optional[float]]:
    """A splittable DoFn's budget per work and micro-batch (--sdf_max_claims_per_batch,
    --sdf_max_seconds_per_batch; 0 or less: no limit)."""
    claims, seconds = int(so.sdf_max_claims_per_batch or 0), float(so.sdf_max_seconds_per_batch or 0)
    return (claims if claims > 0 else None, seconds if seconds > 0 else None)
