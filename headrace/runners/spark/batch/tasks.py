"""The batch runner's Spark task functions for sources, fused stages and plain shuffles, and the
`TaskEnv` they run with.

Every function here is built on the driver into a closure that PySpark ships to the Python
workers, so none of it may rely on driver state: a task gets its settings from a `TaskEnv`
(a `worker.env.WorkerEnv` with the Spark accumulators its metrics go to), and reports a failure
by raising `worker.failures.TaskFailure`, whose message carries the error (pickled) for the
driver to re-raise as the local runner would. Groupings are in `map_side` (before the
shuffle) and `reduce_side` (after it).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple

from headrace.errors import PipelineExecutionError
from headrace.io.iobase import batched
from headrace.metrics.metric import MetricsContainer
from headrace.model.windowed import WindowedValue
from headrace.runners.kit.sources import to_windowed_value
from headrace.runners.kit.stage import FusedStage
from headrace.runners.spark.batch.env import TaskEnv
from headrace.runners.spark.batch.map_side import MapSide, PartialSide
from headrace.runners.kit.columnar import Columns
from headrace.runners.spark.fastpath import VectorBundle
from headrace.runners.spark.worker.packing import pack
from headrace.runners.spark.worker.sides import side_reader, stage_arguments


def create_fn(env: TaskEnv) -> Callable[[Iterator[list]], Iterator[WindowedValue]]:
    """Create: each record of the RDD is one bundle-sized chunk of the values."""
    def run(chunks: Iterator[list]) -> Iterator[WindowedValue]:
        for chunk in chunks:
            for v in chunk:
                yield to_windowed_value(v)
    return run


def stage_fn(env: TaskEnv, stage: FusedStage, sides: Optional[Any], tagged: Optional[Dict[int, int]],
             map_sides: Optional[Dict[int, "MapSide"]] = None, columns: bool = False,
             packer: Callable[[List[Any]], Any] = pack) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """Runs a fused stage over a partition, bundle by bundle.

    `sides` is a broadcast of {side index: {window: [values]}}; `tagged` maps the stage's
    output PCollection ids to indexes when it has several outputs (records are then
    (index, pack(elements of one bundle))); with one output, records are its elements.
    `map_sides` (with `tagged`) gives, for an output that a grouping alone reads, that
    grouping's map side (`MapSide`): the output's records are then the grouping's shuffle
    records (keyed elements, or partial accumulators made over the whole partition), so the
    stage's task does the grouping's map-side work in the same pass and a persisted multi-output
    stage keeps those records instead of the elements. With `columns`, the partition's items
    are its bundles as `kit.columnar.Columns` (a splittable step's outputs), not elements, or
    `fastpath.VectorBundle`s of the stage run already (vectorised) for the lifted combine of its
    one output (`PartialSide.add_vector`). `packer` packs a record's list (the identity where
    the records stay in the task that reads them: a lazily computed wave, `splittable`).
    """
    def chunked(pc: Any, records: List[Any]) -> Iterator[Any]:
        # a map side's records, a tagged record per bundle_size of them
        for i in range(0, len(records), env.bundle_size):
            yield (tagged[pc], packer(records[i:i + env.bundle_size]))  # type: ignore[index]

    def run(it: Iterator[Any]) -> Iterator[Any]:
        env.check_earlier_attempt()
        reader = None
        if sides is not None:
            reader = side_reader(sides.value, stage_arguments(stage))
        committed, attempted = MetricsContainer(), MetricsContainer()
        stage.finalizes = True  # finalize_bundles once the partition's outputs are all handed on
        only = stage.materialized[0] if tagged is None else None
        grouping = MetricsContainer()  # the groupings' map sides: once per partition, not per attempt
        mapped = {pc: side.start(grouping) for pc, side in (map_sides or {}).items()}
        try:
            bundle: Any
            for bundle in (it if columns else batched(it, env.bundle_size)):
                if type(bundle) is VectorBundle:  # (`columns`) for the one output's lifted combine
                    pc = stage.materialized[0]
                    vector_side = mapped[pc]
                    assert isinstance(vector_side, PartialSide)
                    yield from chunked(pc, vector_side.add_vector(bundle))
                    continue
                if not mapped:  # every output as elements
                    outs = (stage.process_bundle(bundle, reader, env.max_attempts, committed, attempted)
                            if not columns else
                            {pc: c.elements() for pc, c in stage.process_columns(
                                bundle, reader, env.max_attempts, committed, attempted).items()})
                    if only is not None:
                        yield from outs[only]
                        continue
                    for pc, lst in outs.items():  # a record per output and bundle: readers unpickle their own
                        if lst:
                            yield (tagged[pc], packer(lst))  # type: ignore[index]
                    continue
                # a map side takes its output's lists as they are (no WindowedValues for them)
                cols = stage.process_columns(bundle if columns else Columns.of_elements(bundle),
                                             reader, env.max_attempts, committed, attempted)
                for pc, out in cols.items():
                    if not out.values:
                        continue
                    side = mapped.get(pc)
                    if side is None:
                        yield (tagged[pc], packer(out.elements()))  # type: ignore[index]
                    else:
                        yield from chunked(pc, side.add(out))
            for pc, side in mapped.items():
                yield from chunked(pc, side.finish())
            stage.finalize_bundles()  # every output of the partition is in Spark's hands
        except PipelineExecutionError as exc:
            raise env.fail(exc) from exc
        finally:
            stage.teardown()
        committed.merge(grouping)
        attempted.merge(grouping)
        env.report(committed, attempted)
    return run


def by_window(records: Iterable[Tuple[Any, Any]]) -> Dict[Any, list]:
    """(window, value) records as side-input contents, {window: [values]} in their order."""
    contents: Dict[Any, list] = {}
    for w, v in records:
        contents.setdefault(w, []).append(v)
    return contents


def memory_and_disk() -> Any:
    """Spark's MEMORY_AND_DISK storage level (what the runner persists RDDs at)."""
    from pyspark import StorageLevel
    return StorageLevel.MEMORY_AND_DISK


def side_records(it: Iterator[WindowedValue]) -> Iterator[Tuple[Any, Any]]:
    """(window, value) for each window of each element: what a side input is collected as."""
    for wv in it:
        for w in wv.windows:
            yield (w, wv.value)


def reshuffle_key_fn(parts: int) -> Callable[[int, Iterator[Any]], Iterator[Tuple[int, Any]]]:
    """Reshuffle: spreads a partition's elements round-robin (deterministic, so a re-run map
    task sends every element where its first run did)."""
    def run(index: int, it: Iterator[Any]) -> Iterator[Tuple[int, Any]]:
        n = index
        for wv in it:
            yield (n % parts, wv)
            n += 1
    return run


def drain(it: Iterator[Any]) -> None:
    """Consumes a partition (the action that runs the pipeline's leaves)."""
    for _ in it:
        pass


def drained(it: Iterator[Any]) -> Iterator[Any]:
    """Consumes a partition and yields nothing (a leaf in a job that collects other results)."""
    drain(it)
    return iter(())


def tagged_side_records(tag: int) -> Callable[[Iterator[WindowedValue]], Iterator[Tuple[int, Any, Any]]]:
    """(tag, window, value) for each window of each element (`side_records`, tagged)."""
    def run(it: Iterator[WindowedValue]) -> Iterator[Tuple[int, Any, Any]]:
        for w, v in side_records(it):
            yield (tag, w, v)
    return run
