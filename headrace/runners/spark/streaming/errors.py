"""Explaining a streaming query's failures in the user's terms: a task's failure as the step's
error, a module Spark's Python workers cannot import, a plan they cannot read, a checkpoint
location a Spark Connect server cannot see, a checkpoint written by another pipeline."""

from __future__ import annotations

import re
import socket
from typing import Any, Optional

from headrace.errors import InvalidArgumentError, PipelineExecutionError
from headrace.runners.spark.streaming.checkpoint import RunFiles
from headrace.runners.spark.worker.failures import pipeline_error


def query_error(exc: BaseException) -> BaseException:
    """A failed query's error as the step's PipelineExecutionError (decoded from the task's)."""
    return pipeline_error(exc, "streaming query", missing_module)


_NO_MODULE = re.compile(r"No module named '([^']+)'")


def missing_module(exc: BaseException) -> Optional[PipelineExecutionError]:
    """A Python worker's failed import (`exc`'s text names the module) as an error saying where
    the module must be installed; None if `exc` is about something else."""
    m = _NO_MODULE.search(str(exc))
    if m is None:
        return None
    return PipelineExecutionError(
        f"the streaming query failed: Spark's Python workers cannot import {m.group(1)!r}. Install "
        "headrace, and the modules your pipeline's functions are defined in, in the Python the "
        "workers run (PYSPARK_PYTHON; on Spark Connect, the server's); on Spark Connect, "
        "spark.addArtifacts(pyfile=True) does not reach the Python process of the query's "
        "foreachBatch sink, so it is not enough for headrace itself")


def build_error(exc: BaseException, files: RunFiles) -> Optional[PipelineExecutionError]:
    """An error building or starting the query, explained when its cause is known (a module the
    server's Python lacks, a plan the server cannot read); else None."""
    missing = missing_module(exc)
    if missing is not None:
        return missing
    if files.plan_path in str(exc):
        return PipelineExecutionError(
            f"Spark's Python workers cannot read the query's plan at {files.plan_path}: the "
            "checkpoint location must be a directory that this process and the Spark driver (on "
            "Spark Connect, the server) see at the same path, such as a shared mount; give one "
            "with --checkpoint_location")
    return None


_LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1", "0.0.0.0", "", None}


def check_connect_checkpoint(spark: Any, checkpoint_location: Optional[str]) -> None:
    """Refuses the default checkpoint location (a temporary directory here) when the Spark
    Connect server runs on another host, where that directory does not exist."""
    if checkpoint_location:
        return
    host = getattr(getattr(spark, "client", None), "host", None)
    if host in _LOCAL_HOSTS or host in (socket.gethostname(), socket.getfqdn()):
        return
    raise InvalidArgumentError(
        f"the Spark Connect server runs on {host}, and the streaming query keeps its plan and "
        "per-batch state in files under its checkpoint location, which this process and the "
        "server must both see at the same path: give --checkpoint_location a directory on a "
        "shared mount (the default, a temporary directory here, is not on the server)")


def check_restart(old: Any, plan: Any, checkpoint: str) -> None:
    """Refuses to resume a checkpoint written by a pipeline of another shape (`StreamPlan.shape`:
    its state and offsets would belong to other steps)."""
    if old.shape == plan.shape:
        return
    gone = [f"{k} {lb!r}" for k, lb in old.shape if (k, lb) not in plan.shape]
    new = [f"{k} {lb!r}" for k, lb in plan.shape if (k, lb) not in old.shape]
    why = "its steps differ: " + "; ".join(
        ([f"no longer here: {', '.join(gone)}"] if gone else [])
        + ([f"new: {', '.join(new)}"] if new else []) or ["their order changed"])
    raise PipelineExecutionError(
        f"the streaming checkpoint at {checkpoint} was written by another pipeline, so it cannot "
        f"resume this one: {why}. Give this pipeline a new --checkpoint_location, or run the "
        "pipeline that wrote it")
