"""`TaskEnv`: the batch runner's `worker.env.WorkerEnv` with the Spark accumulators a task's
metric updates go to, and `guarded`, which turns a step's final failure into the task's."""

from __future__ import annotations

from typing import Any, Iterator

from pyspark.accumulators import AccumulatorParam

from headrace.errors import PipelineExecutionError
from headrace.metrics.metric import MetricsContainer
from headrace.runners.kit.grouping import grouping_failure
from headrace.runners.spark.worker.env import WorkerEnv
from headrace.runners.spark.worker.failures import TaskFailure


class MetricsParam(AccumulatorParam):
    """Spark accumulator of MetricsContainers (one for committed, one for attempted updates)."""

    def zero(self, value: MetricsContainer) -> MetricsContainer:
        return MetricsContainer()

    def addInPlace(self, a: MetricsContainer, b: MetricsContainer) -> MetricsContainer:
        a.merge(b)
        return a


class TaskEnv(WorkerEnv):
    """A batch task's `WorkerEnv` with the Spark accumulators its metric updates go to (one for
    committed, one for attempted updates), and, when the run's progress is shown, the one its
    reads count their records in (`records_read`, else None)."""

    def __init__(self, committed: Any, attempted: Any, bundle_size: int, max_attempts: int,
                 marker_dir: str) -> None:
        super().__init__(bundle_size, max_attempts, marker_dir)
        self.committed = committed
        self.attempted = attempted
        self.records_read: Any = None

    def report(self, committed: MetricsContainer, attempted: MetricsContainer) -> None:
        """Sends a task's metric updates to the driver."""
        if committed.cells:
            self.committed.add(committed)
        if attempted.cells:
            self.attempted.add(attempted)


def guarded(env: TaskEnv, label: str, doing: str, outputs: Iterator[Any]) -> Iterator[Any]:
    """Yields `outputs`; a failure while producing them fails the task as the step's error."""
    try:
        yield from outputs
    except TaskFailure:
        raise
    except PipelineExecutionError as exc:
        raise env.fail(exc) from exc
    except Exception as exc:
        raise env.fail(grouping_failure(label, exc, doing)) from exc

