"""The files headrace keeps beside Spark's checkpoint, under `<checkpoint>/headrace`: the
query's plan (read by the source and the Python workers, and on a restart compared with the
new plan: a checkpoint of another plan shape or state layout is refused) and the driver's state
after each micro-batch (written by the sink, read when the next batch is planned)."""

from __future__ import annotations

import os
import pickle
from typing import Any, Dict, Optional

from headrace.errors import PipelineExecutionError
from headrace.model import coders
from headrace.runners.spark.streaming.coordinator import BatchState
from headrace.utils import secrets


class RunFiles:
    """The files of one streaming run under its checkpoint directory (`<checkpoint>/headrace`):
    the plan (`plan.pkl`), the driver's state after each batch (`batches/<n>.pkl`) and the
    splittable steps' read journals (`sdf-reads/`)."""

    def __init__(self, checkpoint: str) -> None:
        self.root = os.path.join(checkpoint, "headrace")
        self.plan_path = os.path.join(self.root, "plan.pkl")
        self.batches = os.path.join(self.root, "batches")
        #: the splittable steps' read journals (`splittable.ReadJournal`)
        self.sdf_reads = os.path.join(self.root, "sdf-reads")

    def write_plan(self, plan: Any) -> Dict[str, str]:
        """Stores the plan (atomically; cloudpickle, so a source's functions, such as a
        `timestamp_fn` lambda, travel) without its credentials: returns the map of the
        `Secret`s left out (`headrace.utils.secrets`; within the caller's `left_out`, its map),
        which the workers get in memory."""
        os.makedirs(self.batches, exist_ok=True)
        with secrets.left_out() as left:
            data = coders.dumps(plan)
        _atomic_write(self.plan_path, data)
        return left

    def read_plan(self) -> Any:
        """The stored plan; a plan whose headrace classes this version does not have (written by
        another version of headrace, see "Checkpoint compatibility" in docs/semantics.md) is
        refused with an error that says to start from a fresh checkpoint location."""
        with open(self.plan_path, "rb") as fh:
            try:
                return pickle.load(fh)
            except (AttributeError, ImportError) as exc:
                if "headrace" not in str(exc):
                    raise  # e.g. a module of the user's that this process lacks
                raise PipelineExecutionError(
                    f"the streaming checkpoint at {os.path.dirname(self.root)} was written by "
                    f"another version of headrace, whose plan this one cannot read "
                    f"({type(exc).__name__}: {exc}); give this pipeline a new "
                    "--checkpoint_location") from exc

    def batch_state(self, n: int, n_groupings: int) -> Optional[BatchState]:
        """The driver's state after batch n (a fresh one for n = -1; None if not written)."""
        if n < 0:
            return BatchState(n_groupings)
        path = os.path.join(self.batches, f"{n}.pkl")
        if not os.path.exists(path):
            return None
        with open(path, "rb") as fh:
            return pickle.load(fh)  # type: ignore[no-any-return]

    def write_batch_state(self, n: int, state: BatchState) -> None:
        """Stores the state after batch n (atomically; a re-run batch writes the same again) and
        drops states older than the previous batch's."""
        _atomic_write(os.path.join(self.batches, f"{n}.pkl"),
                      pickle.dumps(state, pickle.HIGHEST_PROTOCOL))
        old = os.path.join(self.batches, f"{n - 10}.pkl")
        if os.path.exists(old):
            os.remove(old)

    def last_batch(self) -> int:
        """The newest batch whose driver state is stored (-1: none)."""
        best = -1
        if os.path.isdir(self.batches):
            for name in os.listdir(self.batches):
                if name.endswith(".pkl") and name[:-4].lstrip("-").isdigit():
                    best = max(best, int(name[:-4]))
        return best

    def mark_finished(self, n: int) -> None:
        """Records that nothing is left to do after batch n (the runner then stops the query)."""
        if self.finished_batch() != n:
            _atomic_write(os.path.join(self.root, "finished"), str(n).encode())

    def finished_batch(self) -> Optional[int]:
        """The batch after which nothing is left to do, once the source has seen it."""
        try:
            with open(os.path.join(self.root, "finished"), "rb") as fh:
                return int(fh.read())
        except (OSError, ValueError):
            return None


def _atomic_write(path: str, data: bytes) -> None:
    """Writes `data` to `path` so that readers see the old file or the whole new one."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
