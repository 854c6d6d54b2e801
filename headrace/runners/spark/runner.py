"""`SparkRunner`: runs a pipeline on Apache Spark, as batch jobs (`batch/`) or as one Structured
Streaming query (`streaming/`)."""

from __future__ import annotations

from typing import Any

from headrace.pipeline.pipeline import Pipeline, PipelineResult
from headrace.runners.spark import session as sessions


class SparkRunner:
    """Runs pipelines on Apache Spark (pass a SparkSession, or let it make one).

    A bounded pipeline runs as Spark batch jobs over RDDs (`batch.translation`): element-wise
    steps fused and run per partition in bundles of `--bundle_size` (DoFn lifecycle per bundle,
    a failed bundle retried whole up to `--max_bundle_attempts` inside its task; a crashed task
    is retried by Spark and its outputs discarded), GroupByKey a shuffle sorted by event time
    within each key and streamed through the per-key core under a perfect watermark,
    CombinePerKey with a watermark-only trigger lifted (partial combine before the shuffle),
    side inputs broadcast, metrics through accumulators.

    A pipeline with an unbounded source, or run with `--streaming`, runs as one Structured
    Streaming query instead (`streaming.runner`). On a Spark Connect session (`spark` one, or
    `--spark_remote`), which serves no RDDs, a bounded pipeline runs as the same batch jobs made
    of DataFrame operations (`batch.frames`).
    """

    def __init__(self, spark: Any = None) -> None:
        self._spark = spark

    def run_pipeline(self, pipeline: Pipeline, options: Any) -> PipelineResult:
        """Executes the pipeline as Spark jobs (or one streaming query) and returns its result."""
        spark = self._spark if self._spark is not None else sessions.get_session(options)
        streaming = is_streaming(pipeline, options)
        if streaming:
            from headrace.runners.spark.streaming.runner import SparkStreamingRunner
            return SparkStreamingRunner(spark).run_pipeline(pipeline, options)
        from headrace.runners.spark.batch.translation import BatchTranslation
        return BatchTranslation(spark, pipeline, options).run()


def is_streaming(pipeline: Pipeline, options: Any) -> bool:
    """Whether a pipeline runs as a streaming query: --streaming, or an unbounded PCollection
    (an unbounded source's, or an unbounded-per-element splittable DoFn's output)."""
    if options is not None and getattr(options, "streaming", False):
        return True
    return any(not pc.is_bounded for n in pipeline.primitives() for pc in n.outputs.values())
