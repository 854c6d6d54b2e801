"""The reduce side of the batch runner's shuffles: each key's records, sorted by event time, run
through the per-key core (`kit.grouping.GroupingCore`) under a perfect watermark, or through a
stateful ParDo (`kit.stateful.StatefulCore`)."""

from __future__ import annotations

from itertools import chain, groupby
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple

from headrace.errors import PipelineExecutionError
from headrace.metrics.metric import MetricsContainer, metrics_scope
from headrace.model import coders
from headrace.model.reduce import Element, KeyState
from headrace.model.time import MAX_TIMESTAMP_MICROS, MIN_TIMESTAMP_MICROS
from headrace.model.strategy import Windowing
from headrace.model.window import Sessions
from headrace.model.windowed import WindowedValue
from headrace.runners.kit.grouping import GroupingCore
from headrace.runners.kit.stateful import StatefulCore, StatefulSpec, StatefulStep, UserKeyState
from headrace.runners.spark.batch.env import TaskEnv, guarded
from headrace.runners.spark.batch.map_side import side_combiner
from headrace.runners.spark.fastpath import vector_combiner
from headrace.runners.spark.fastpath.blocks import (BlockRecords, BlockStore, GroupBlock, block_panes,
                                                    sort_blocks_apart)
from headrace.runners.spark.batch.frames import FrameContext
from headrace.runners.spark.worker.sorting import budget_bytes, sort_records
from headrace.runners.spark.worker.packing import pack

if TYPE_CHECKING:
    from headrace.diagram.recording import RecordPanes

_PROCESSING_TIME = 0  # batch: processing time stands still, so processing-time triggers never fire


def columnar_shuffle(label: str, windowing: Windowing, combine_fn: Any, input_retractions: bool
                     ) -> Optional[BlockRecords]:
    """Whether a lifted combine without side inputs shuffles its vectorised groups as columnar
    blocks (`fastpath.blocks`): when it has a vectorised combiner and every window gets one pane
    (`ReduceFnRunner.one_pane_per_window` under the perfect watermark). Then how its reduce side
    reads blocks beside ordinary records (`BlockRecords`), else None."""
    vector = vector_combiner(combine_fn, windowing)
    if vector is None or not GroupingCore(label, windowing, None, input_retractions=input_retractions,
                                          expire_at_end_of_window=True).core.one_pane_per_window:
        return None
    return BlockRecords(coders.dumps(combine_fn), windowing, vector.what)


def sort_budget(sc: Any) -> float:
    """The bytes of records a reading task's sort holds (`worker.sorting.budget_bytes` of the
    context's `spark.python.worker.memory`, on RDDs or Spark Connect's frames)."""
    if isinstance(sc, FrameContext):
        setting = sc.worker_memory()
    else:
        setting = sc.getConf().get("spark.python.worker.memory", "512m")
    return budget_bytes(str(setting or "512m"))


def sort_shuffled(records: Iterable[Tuple[Any, Any]], budget: float,
                  explode: Optional[Callable[[GroupBlock], Iterator[Tuple[Any, Any]]]] = None
                  ) -> Iterator[Tuple[Any, Any]]:
    """A grouping's shuffled partition for its reduce side: its records sorted by key
    (`worker.sorting.sort_records`); or, when it holds only columnar blocks of a vectorised combine
    (`fastpath.blocks`), (None, [blocks]) items, no two of which share a key, the blocks held
    within a third of `budget` bytes and spilled in sub-buckets of their keys beyond it (the
    reduce of a list of blocks takes about three times their bytes). Blocks beside ordinary
    records come sorted among them as the records they stand for (`explode`)."""
    store = BlockStore(budget / 3)
    out = sort_records(sort_blocks_apart(iter(records), store, explode), budget)
    first = next(out, None)
    if first is not None:
        yield first
        yield from out
        return
    for group in store.groups():
        yield None, group


def follows_event_time(windowfn: Any) -> bool:
    """Whether a grouping's watermark may follow its sorted input: yes unless the WindowFn merges
    windows other than overlapping ones (a user's merging WindowFn may merge distant windows, so
    its keys see the watermark only at their end, as on the local runner)."""
    return not windowfn.is_merging() or isinstance(windowfn, Sessions)


def reduce_fn(env: TaskEnv, label: str, windowing: Windowing, combine_fn_bytes: Optional[bytes],
              accumulators_in: bool, input_retractions: bool, late_output: bool,
              side_combine: Optional[Tuple[bytes, Any, bool]] = None,
              recording: Optional["RecordPanes"] = None) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """GroupByKey / CombinePerKey, reduce side: streams each key's sorted records through the core.

    Records arrive sorted by (key bytes, time). For each key the core sees them in chunks of up
    to `bundle_size`, under a perfect watermark: before a chunk the watermark moves to the
    chunk's first time (no later record is earlier), and after the key's last record to
    +infinity. Nothing is ever late, so a window is complete once the watermark passes its
    end; its garbage collection happens then too (`expire_at_end_of_window`), which gives
    exactly the panes of a watermark that jumps to +infinity at the end of bounded input.
    Processing time stands still: processing-time triggers never fire before the watermark.
    Output records are elements, or (0 | 1, element) with a late-data output.

    A CombinePerKey with side inputs (`side_combine`: the pickled SideInputCombiner, the broadcast
    side inputs, whether partial accumulators come in) groups like a GroupByKey, and each pane's
    values or partial accumulators are combined with the side inputs of the pane's window.
    With `recording` (`--record_panes`) the core's events are recorded, a file per task.
    """
    follow = follows_event_time(windowing.windowfn)

    def run(it: Iterator[Any]) -> Iterator[Any]:
        env.check_earlier_attempt()
        combine_fn = coders.loads(combine_fn_bytes) if combine_fn_bytes is not None else None
        finish = None
        lifecycle: Any = combine_fn  # set up and torn down around the partition
        if side_combine is not None:
            combiner_bytes, sides, partials_in = side_combine
            combiner = side_combiner(combiner_bytes, sides)
            lifecycle = combiner
            finish = combiner.finish if partials_in else combiner.combine
        grouping = GroupingCore(label, windowing, combine_fn, late_output=late_output,
                                input_retractions=input_retractions,
                                inputs_are_accumulators=accumulators_in, expire_at_end_of_window=True,
                                finish=finish)
        if recording is not None:   # (named after the partition: see recording.PaneRecorder)
            from pyspark import TaskContext
            ctx = TaskContext.get()
            grouping.recorder = recording.recorder(
                label, f"p{ctx.partitionId() if ctx is not None else 0:05d}")
        committed = MetricsContainer()
        final = grouping.core.one_pane_per_window and finish is None and recording is None
        yield from guarded(env, label, "combining or grouping", _reduce_partition(
            label, grouping, lifecycle, it, env.bundle_size, follow, committed, final))
        grouping.close_recording()   # (a retry replaces a failed attempt's files, if it wrote any)
        env.report(committed, committed)
    return run


def _reduce_partition(label: str, grouping: GroupingCore, lifecycle: Any, it: Iterator[Any], size: int,
                      follow: bool, committed: MetricsContainer, final: bool) -> Iterator[Any]:
    with metrics_scope(committed, label):
        if lifecycle is not None:
            lifecycle.setup()
        if final:
            yield from _reduce_final(grouping, lifecycle, it)
        else:
            yield from _reduce_all(grouping, it, size, follow)
        if lifecycle is not None:
            lifecycle.teardown()


def _reduce_all(grouping: GroupingCore, it: Iterator[Any], size: int, follow: bool) -> Iterator[Any]:
    """The outputs of a partition's sorted records (see `reduce_fn`): elements, or (index,
    element) records when the step has a late-data output."""
    current: Optional[bytes] = None
    key: Any = None
    state = KeyState()
    wm = chunk_wm = 0
    chunk: List[Element] = []
    out: List[WindowedValue] = []
    late: Optional[List[WindowedValue]] = [] if grouping.late_output else None
    for rkey, (k, v, ts, w) in it:
        kb, t, r = rkey[0], rkey[1], rkey[2]  # a partial accumulator's key has its map partition too
        if not follow:
            t = MIN_TIMESTAMP_MICROS
        if kb != current or len(chunk) >= size:
            if chunk:
                _feed(grouping, key, state, chunk, wm, chunk_wm, out, late)
                wm = chunk_wm
                chunk = []
            if kb != current:
                if current is not None:
                    grouping.on_watermark(key, state, MAX_TIMESTAMP_MICROS, _PROCESSING_TIME, out)
                current, key, state = kb, k, KeyState()
                wm = t
            chunk_wm = t
            if out or late:
                yield from _records(out, late)
                out = []
                late = [] if late is not None else None
        chunk.append(Element(v, ts, w, r))
    if chunk:
        _feed(grouping, key, state, chunk, wm, chunk_wm, out, late)
    if current is not None:
        grouping.on_watermark(key, state, MAX_TIMESTAMP_MICROS, _PROCESSING_TIME, out)
    yield from _records(out, late)


def _reduce_final(grouping: GroupingCore, combine_fn: Any, it: Iterator[Any]) -> Iterator[Any]:
    """`_reduce_all` for a grouping whose every window has one pane at its end
    (`ReduceFnRunner.one_pane_per_window`): each key's sorted records go to
    `ReduceFnRunner.final_panes`, which gives the panes the core gives them under the perfect
    watermark, without its per-call bookkeeping. A partition of columnar blocks comes as
    (None, [blocks]) items of key-disjoint blocks (`sort_shuffled`), each reduced
    at once (`fastpath.blocks.block_panes`)."""
    final_panes = grouping.core.final_panes
    late = grouping.late_output   # (nothing is late here: the late output stays empty)
    it = iter(it)
    head = next(it, None)
    if head is None:
        return
    if head[0] is None:
        windowing = grouping.core.windowing
        what = vector_combiner(combine_fn, windowing).what   # type: ignore[union-attr]
        for _, blocks in chain((head,), it):
            for wv in block_panes(blocks, combine_fn, windowing, what):
                yield (0, wv) if late else wv
        return
    for _, records in groupby(chain((head,), it), _key_bytes):
        first = next(records)
        key = first[1][0]
        items = chain((first[1][1:],), (r[1][1:] for r in records))
        for p in final_panes(items):
            wv = WindowedValue((key, p.value), p.timestamp_us, (p.window,), p.pane_info)
            yield (0, wv) if late else wv


def _key_bytes(record: Any) -> bytes:
    """A shuffle record's key bytes (records come sorted by them)."""
    return record[0][0]


def _feed(grouping: GroupingCore, key: Any, state: KeyState, chunk: List[Element], wm: int, chunk_wm: int,
          out: List[WindowedValue], late: Optional[List[WindowedValue]]) -> None:
    """Hands a chunk of a key's sorted records to the core, the watermark first moved from `wm` to
    the chunk's first time `chunk_wm`."""
    if chunk_wm > wm:
        grouping.on_watermark(key, state, chunk_wm, _PROCESSING_TIME, out)
    grouping.process(key, state, chunk, chunk_wm, _PROCESSING_TIME, out, late)


def _records(out: List[WindowedValue], late: Optional[List[WindowedValue]]) -> Iterator[Any]:
    """Output records: the elements, or (0, element) and (1, late element) with a late output."""
    if late is None:
        yield from out
        return
    for wv in out:
        yield (0, wv)
    for wv in late:
        yield (1, wv)


def _key_bundles(it: Iterator[Any], size: int) -> Iterator[List[Tuple[Any, List[WindowedValue]]]]:
    """A partition's sorted stateful records as bundles of whole keys, (key, its elements in time
    order), of about `size` elements (a key with more is a bundle of its own)."""
    bundle: List[Tuple[Any, List[WindowedValue]]] = []
    n = 0
    current: Optional[bytes] = None
    elements: List[WindowedValue] = []
    for (kb, _, _), (k, wv) in it:
        if kb != current:
            if n >= size:
                yield bundle
                bundle, n = [], 0
            current, elements = kb, []
            bundle.append((k, elements))
        elements.append(wv)
        n += 1
    if bundle:
        yield bundle


def stateful_fn(env: TaskEnv, spec: StatefulSpec, tagged: Optional[Dict[int, int]]
                ) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """A stateful ParDo over a partition of records sorted by (key bytes, timestamp).

    Each key starts with empty state and sees its elements in time order under a watermark
    that follows them (before an element at t the watermark moves to t, firing the event-time
    timers before t and expiring the windows that ended before it), then moves to +infinity,
    which fires the rest and expires every window. Processing time stands still until then, so
    processing-time timers fire at the end (or when their window expires). A bundle is a run
    of whole keys, retried whole. Records out are as `stage_fn`'s."""
    def run(it: Iterator[Any]) -> Iterator[Any]:
        env.check_earlier_attempt()
        committed, attempted = MetricsContainer(), MetricsContainer()
        step = StatefulStep(spec, processing_time_at_expiry=True)
        only = spec.step.outputs[0][1] if tagged is None else None
        try:
            for keys in _key_bundles(it, env.bundle_size):
                outs = step.run_bundle(lambda core: _stateful_keys(core, keys), lambda: None,
                                       env.max_attempts, committed, attempted)
                if only is not None:
                    yield from outs[only]
                    continue
                for pc, lst in outs.items():
                    if lst:
                        yield (tagged[pc], pack(lst))  # type: ignore[index]
        except PipelineExecutionError as exc:
            raise env.fail(exc) from exc
        finally:
            step.teardown()
        env.report(committed, attempted)
    return run


def _stateful_keys(core: StatefulCore, keys: List[Tuple[Any, List[WindowedValue]]]) -> None:
    """Runs whole keys through a stateful core under a watermark that follows their elements."""
    for k, elements in keys:
        state = UserKeyState()
        wm = MIN_TIMESTAMP_MICROS
        for wv in elements:
            t = wv.timestamp_us
            if t > wm:
                core.on_watermark(k, state, t, None)
                wm = t
            core.process(k, state, [wv], wm, None)
        core.on_watermark(k, state, MAX_TIMESTAMP_MICROS, None)
