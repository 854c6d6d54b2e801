"""Beam's `apache_beam.runners.runner`: PipelineRunner, PipelineResult and PipelineState."""

from headrace.pipeline.pipeline import PipelineResult, PipelineState
from headrace.pipeline.runner_registry import PipelineRunner

__all__ = ["PipelineResult", "PipelineRunner", "PipelineState"]
