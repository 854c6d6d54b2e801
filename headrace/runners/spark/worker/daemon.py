"""The Python daemon of the Spark sessions headrace starts (`spark.python.daemon.module`).

PySpark's daemon forks a Python worker for each task that needs one, and a fresh worker
imports what its task needs. Three things made that slow (measured with py-spy over the test
suite: about two thirds of the Python workers' CPU time):

* Spark puts its own archives (`pyspark.zip`, `py4j-*.zip`) first on the workers' import path.
  Python keeps no bytecode cache for modules in an archive, so each new worker compiled
  pyspark from source, and `importlib.invalidate_caches()`, which each task's setup calls,
  re-read the archives' directories (through their finders cached in
  `sys.path_importer_cache`, which outlive the path entries).
* Spark also puts the jar of its core (`pyspark/jars/spark-core_*.jar`, 40 MB and about 6,000
  entries, no Python file) on that path (`PythonUtils.sparkPythonPath` adds the jar it is loaded
  from, a leftover of the days pyspark shipped inside Spark's assembly jar), so each task's
  `importlib.invalidate_caches()` re-read that jar's directory too: 55 ms a task here.
* Each worker imported pyspark's worker and headrace's modules anew.

This daemon drops those archives from the path, and their cached finders, when the same
packages are installed outside them (a pip-installed pyspark: the same files), and the jars
on the path that hold no Python file, imports
pyspark's worker modules and headrace's modules that start no thread before it forks
(`PRELOAD`), then runs PySpark's daemon. pyarrow, numpy and pandas start threads when
imported (jemalloc's background thread, OpenBLAS's pool), and a fork copies only the thread that
forks: they are imported before the fork only under settings that keep them thread-free
(`THREADLESS_ENV`, unless the user set other values; `HEAVY_PRELOAD`), and a daemon that finds a
thread after them starts itself again without them.

A reused worker of PySpark's daemon also runs a full garbage collection after every task
(`gc.collect()`), which walks every object of the process: the modules above, pyarrow's and
pandas', the task's plan. Measured with py-spy over a streaming query of 100,000 events per
micro-batch: 66-84% of the workers' CPU time was that collection (48-68 ms a call with pandas
imported). This daemon freezes what it imported before it forks (`gc.freeze()`: the collector
leaves those objects alone, in the daemon and in each worker it forks, as Python's documentation
advises for a process that forks) and has the end of a task collect the young generations only
(`gc.collect(1)`): a task's own cyclic garbage is freed as before, and Python's collector still
runs its full collections when its own thresholds say so.
"""

from __future__ import annotations

import gc
import importlib
import os
import sys
import zipfile
from importlib.machinery import PathFinder
from typing import List

# Imported before the daemon forks; none of them imports pyarrow or pandas (a test checks).
PRELOAD = (
    "pyspark.worker", "pyspark.sql.worker.create_data_source",
    "pyspark.sql.worker.lookup_data_sources", "pyspark.sql.pandas.serializers",
    "pyspark.sql.streaming.stateful_processor", "pyspark.sql.streaming.stateful_processor_api_client",
    "headrace", "headrace.model.reduce", "headrace.runners.kit.plan",
    "headrace.runners.kit.grouping", "headrace.runners.kit.dofn_runner",
)

_ARCHIVES = ("pyspark", "py4j")

#: Set, unless already set, before the imports of `HEAVY_PRELOAD`, which then start no thread:
#: pyarrow's bundled jemalloc starts a background purging thread and numpy's OpenBLAS its thread
#: pool unless told otherwise (one BLAS thread a worker, a worker a core: what Spark's own
#: OMP_NUM_THREADS for Python workers aims at too).
THREADLESS_ENV = (("JE_ARROW_MALLOC_CONF", "background_thread:false"), ("OPENBLAS_NUM_THREADS", "1"))
#: Imported before the fork too when `THREADLESS_ENV` holds and they start no thread: a fresh
#: worker otherwise spent about 0.35 s importing them (pandas 0.21 s) before its first task.
HEAVY_PRELOAD = ("numpy", "pyarrow", "pandas", "headrace.runners.spark.streaming.stages",
                 "headrace.runners.spark.streaming.processor", "headrace.runners.spark.batch.env")
#: Set by a daemon that found a thread after `HEAVY_PRELOAD` and started itself again without it.
LIGHT = "HEADRACE_DAEMON_LIGHT"


def drop_spark_archives(path: List[str]) -> List[str]:
    """`path` without Spark's pyspark / py4j archives, if both packages are found without
    them, and without the jars that hold no Python file (`holds_python`)."""
    path = [p for p in path if not p.endswith(".jar") or holds_python(p)]
    archives = [p for p in path if p.endswith(".zip") and os.path.basename(p).startswith(_ARCHIVES)]
    rest = [p for p in path if p not in archives]
    if archives and all(PathFinder.find_spec(name, rest) is not None for name in _ARCHIVES):
        return rest
    return path


def holds_python(archive: str) -> bool:
    """Whether a zip or jar on the import path has a Python file in it (one that cannot be read
    is kept: the import system then reports it as it would)."""
    try:
        with zipfile.ZipFile(archive) as z:
            return any(n.endswith((".py", ".pyc", ".so", ".pyd")) for n in z.namelist())
    except (OSError, zipfile.BadZipFile):
        return True


def preload() -> None:
    """Imports PRELOAD (a module that cannot be imported here is left to the workers)."""
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the worker imports it itself and reports any error
            pass


def threads() -> int:
    """The threads of this process (1 where /proc cannot tell)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


def preload_heavy() -> bool:
    """Imports `HEAVY_PRELOAD` when `THREADLESS_ENV` holds (set here unless the user set other
    values); False if they were left to the workers (the user's settings, or `LIGHT`)."""
    if os.environ.get(LIGHT):
        return False
    for key, value in THREADLESS_ENV:
        os.environ.setdefault(key, value)
    if any(os.environ[key] != value for key, value in THREADLESS_ENV):
        return False
    for name in HEAVY_PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the worker imports it itself and reports any error
            pass
    return True


def forget_finders(dropped: List[str]) -> None:
    """Drops the cached import finders of the path entries `dropped`: the finder of an archive
    stays in `sys.path_importer_cache` after its entry left `sys.path`, and each
    `importlib.invalidate_caches()` (one per task, in PySpark's worker setup) re-read the
    archive's directory through it (measured: 5.6 ms a call for pyspark's and py4j's)."""
    for entry in dropped:
        # the entry's own finder and those of packages under it (e.g. "x.jar/org")
        for key in [k for k in sys.path_importer_cache if k == entry or k.startswith(entry + "/")]:
            del sys.path_importer_cache[key]


def fix_path() -> None:
    """Drops Spark's archives from `sys.path` (`drop_spark_archives`) and their finders."""
    kept = drop_spark_archives(sys.path)
    forget_finders([p for p in sys.path if p not in kept])
    sys.path[:] = kept


class YoungCollector:
    """Stands for the `gc` module in PySpark's daemon, whose only use of it is the full
    collection a reused worker runs after each task: this collects the young generations only."""

    @staticmethod
    def collect() -> int:
        """Collects generations 0 and 1 (what a task allocated and left in cycles)."""
        return gc.collect(1)


def main() -> None:
    """Runs PySpark's daemon after the path fix and the imports above, with what they imported
    frozen out of the collector's reach and a young collection after each task."""
    fix_path()
    preload()
    if preload_heavy() and threads() > 1:
        # a thread started after all (an import the settings above do not cover): a fork would
        # copy only this one, so start again and leave those imports to the workers
        os.environ[LIGHT] = "1"
        os.execv(sys.executable, [sys.executable, "-m", __spec__.name if __spec__ else
                                  "headrace.runners.spark.worker.daemon", *sys.argv[1:]])
    from pyspark import daemon
    gc.collect()
    gc.freeze()
    daemon.gc = YoungCollector()  # type: ignore[assignment]
    daemon.manager()


if __name__ == "__main__":
    main()
