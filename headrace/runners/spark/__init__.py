"""The Spark runner: bounded pipelines as Spark batch jobs through PySpark."""

from headrace.runners.spark.runner import SparkRunner

__all__ = ["SparkRunner"]
