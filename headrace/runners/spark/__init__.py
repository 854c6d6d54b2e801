"""The Spark runner: bounded pipelines as Spark batch jobs (`batch/`), unbounded ones as a
Structured Streaming query (`streaming/`), both running `worker/` inside Spark tasks; `SparkRunner`
(`runner.py`) chooses between them."""

from headrace.runners.spark.runner import SparkRunner

__all__ = ["SparkRunner"]
