"""`WorkerEnv`: what every Spark task of headrace's needs from the driver, and the markers that
make Spark's re-attempt of a failed task fail as the first attempt did.

A step that gave up on a bundle after `max_bundle_attempts` leaves a marker in the run's
directory, so that Spark's own re-attempts of that task fail at once instead of multiplying the
attempts (Spark's retries are for crashed workers and lost executors, headrace's for bundles).
"""

from __future__ import annotations

import os
import pickle
from typing import Optional

from headrace.errors import PipelineExecutionError
from headrace.model import coders, typecoders
from headrace.runners.kit.runtime import relax_gc
from headrace.runners.spark.worker.failures import TaskFailure, failure_payload
from headrace.utils import secrets


class WorkerEnv:
    """A task's settings (picklable; built on the driver): bundle size, bundle attempts, and the
    directory of failure markers.

    It also carries the credentials left out of a stored plan (`headrace.utils.secrets`) and
    the coders registered on the driver (`coders.registry.register_coder`,
    `coders.register_key_encoder`), which every task installs in its worker first
    (`install_registrations`), so that keys of a user's class encode there as on the driver even
    when the registration is not made at import time."""

    def __init__(self, bundle_size: int, max_attempts: int, marker_dir: str) -> None:
        self.bundle_size = bundle_size
        self.max_attempts = max_attempts
        self.marker_dir = marker_dir
        self.custom_coders = typecoders.registry.custom_coders()
        self.key_encoders = coders.custom_key_encoders()
        self.secrets = secrets.known()

    def install_registrations(self) -> None:
        """Installs the driver's registered coders and key encoders in this (worker) process,
        and the credentials left out of the stored plan (`headrace.utils.secrets`)."""
        if self.secrets:
            secrets.remember(self.secrets)
        if self.custom_coders:
            typecoders.registry.install(self.custom_coders)
        if self.key_encoders:
            coders.install_key_encoders(self.key_encoders)

    def _marker(self) -> Optional[str]:
        from pyspark import TaskContext
        ctx = TaskContext.get()
        if ctx is None:
            return None
        return os.path.join(self.marker_dir, f"failed-{ctx.stageId()}-{ctx.partitionId()}")

    def check_earlier_attempt(self) -> None:
        """In a Spark re-attempt of a task whose step gave up on a bundle: fail the same way.

        Every task function calls this first; it also relaxes the worker's cyclic garbage
        collector (`relax_worker_gc`) and installs the driver's registered coders."""
        relax_worker_gc()
        self.install_registrations()
        from pyspark import TaskContext
        ctx = TaskContext.get()
        if ctx is None or ctx.attemptNumber() == 0:
            return
        path = self._marker()
        if path and os.path.exists(path):
            with open(path, "rb") as fh:
                raise TaskFailure(pickle.load(fh))

    def fail(self, exc: PipelineExecutionError) -> TaskFailure:
        """Records a final failure (see module doc) and returns the exception to raise."""
        payload = failure_payload(exc)
        path = self._marker()
        if path:
            try:
                os.makedirs(self.marker_dir, exist_ok=True)
                with open(path + ".tmp", "wb") as fh:
                    pickle.dump(payload, fh)
                os.replace(path + ".tmp", path)
            except OSError:
                pass  # no shared temp dir: Spark's re-attempts then run the step again
        return TaskFailure(payload)


_GC_RELAXED = False


def relax_worker_gc() -> None:
    """Collects cyclic garbage less often in this Python worker (`kit.runtime.relax_gc`), once per
    worker process, which runs only Spark tasks."""
    global _GC_RELAXED
    if not _GC_RELAXED:
        relax_gc()
        _GC_RELAXED = True
