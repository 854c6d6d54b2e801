"""The element-wise part of one level of a streaming query, as a `mapInArrow` function.

A level is everything between two stateful operators: the fused stages (`kit.stage.FusedStage`)
and the Flattens / Reshuffles whose inputs are made at that level. Per partition, the function
takes the rows of the PCollections it reads, runs each bundle through its stage (lifecycle,
retries and metrics as in every runner), and emits:

* the elements a grouping of the next level reads, keyed (`rows.KEYED`, grouping index + key
  bytes): one row per grouping and key, holding its elements with their bundles and places,
  or, for a lifted combine (`kit.partial.lift`), its partial accumulators per window (and the
  elements behind the watermark of a split lift);
* the elements later levels read (one row per bundle), and reports, as `rows.PASS` rows spread
  over the partitions;
* the control row once per partition of the next stateful operator (`rows.CTL` with each of
  the `ctl_keys`, which hash to distinct partitions), or, after the last level, once for the
  driver;
* one report with the metric updates of the partition's bundles.

Elements of PCollections nobody reads later are dropped here.
"""

from __future__ import annotations

import pickle
import zlib
from operator import itemgetter
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Tuple

from headrace.errors import PipelineExecutionError
from headrace.metrics.metric import MetricsContainer, metrics_scope
from headrace.model import coders
from headrace.model.time import MAX_TIMESTAMP_MICROS
from headrace.model.windowed import WindowedValue
from headrace.io.iobase import ArrowBatchSource, batched
from headrace.runners.kit.grouping import grouping_errors, grouping_key_bytes, key_of
from headrace.runners.kit.partial import PartialCombiner
from headrace.runners.kit.side_inputs import SideInputReader
from headrace.runners.kit.sdf import expand_outputs, read_positions
from headrace.runners.kit.sources import range_failure, to_windowed_value
from headrace.runners.kit.stage import FusedStage
from headrace.runners.spark.fastpath import VectorCombiner, vector_chain, vector_combiner
from headrace.runners.spark.streaming import rows
from headrace.runners.spark.streaming.splittable import emit_inputs
from headrace.runners.spark.worker.packing import pack
from headrace.runners.spark.worker.sides import side_reader, stage_arguments
from headrace.runners.spark.streaming.result import ELEMENTS_READ, PROGRESS_NAMESPACE

_SPREAD = 64   # keys a side step's main input is spread over


class LevelUnit(NamedTuple):
    """A stage (`stage` set) or a Flatten / Reshuffle (`stage` None) of a level; a stage with
    side inputs names its side step (`side_step`), whose released elements it reads."""

    label: str
    inputs: Tuple[int, ...]
    outputs: Tuple[int, ...]
    stage: Optional[FusedStage]
    side_step: Optional[int] = None


class LevelSpec(NamedTuple):
    """What one level's function runs and where its outputs go (picklable)."""

    units: Tuple[LevelUnit, ...]
    keyed: Dict[int, Tuple[Tuple[int, str], ...]]   # pc -> (grouping index, label) reading it next
    later: frozenset                                 # pcs read by a later level
    ctl_keys: Optional[Tuple[bytes, ...]]            # the next operator's partition keys, or None
    bundle_size: int
    max_attempts: int
    spread: Dict[int, Tuple[int, ...]] = {}          # pc -> side steps reading it as main input
    broadcast: frozenset = frozenset()               # pcs read as side inputs next level
    # lifted combines of the next level (`kit.partial.lift`): grouping -> (CombineFn, windowing,
    # whether the inputs behind its input watermark go as elements: `kit.partial.Lift.SPLIT`)
    lifted: Dict[int, Tuple[bytes, Any, bool]] = {}
    buckets: int = 1                                 # buckets of keys per grouping (`rows.bucket_key`)
    # the first level of a split read (`source.SourcePlan.split_reads`): unbounded source index
    # -> (step label, UnboundedSource, output pc), whose ranges (`rows.READ_PC`) it reads
    reads: Dict[int, Tuple[str, Any, int]] = {}
    splittable: Dict[int, Any] = {}                  # next level's splittable steps: index -> spec


Item = Tuple[int, int, WindowedValue]  # (bundle, seq, element)


def level_fn(spec: LevelSpec, env: Any) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The mapInArrow function of one level (see the module doc); `env` is a `tasks.TaskEnv`
    (a step's final failure is recorded so that Spark's retries of the task fail the same way)."""

    # per split read (`LevelSpec.reads`): how it is read on the vectorised path, or None
    vector_reads: Dict[int, Optional[_VectorRead]] = {}

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        env.check_earlier_attempt()
        try:
            yield from _Partition(spec, vector_reads).run(batches)
        except PipelineExecutionError as exc:
            raise env.fail(exc) from exc

    return run


class _Partition:
    """One partition's run of a level: takes its rows, reads its source ranges, runs the
    level's units and emits its rows (see the module doc)."""

    def __init__(self, spec: LevelSpec, vector_reads: Dict[int, Optional[_VectorRead]]) -> None:
        self.spec = spec
        self.vector_reads = vector_reads
        self.buffers: Dict[int, List[Item]] = {}
        self.passed: List[Tuple[int, int, int, bytes]] = []   # (pc, bundle, seq, payload) as they came
        self.control: Optional[bytes] = None
        self.sides: Dict[int, Dict[int, Dict[Any, list]]] = {}   # side step -> side index -> contents
        self.ranges: List[Tuple[Tuple[int, Any, Any], int]] = []  # ((source, start, end), bundle) to read
        self.committed, self.attempted = MetricsContainer(), MetricsContainer()
        self.vectors: Dict[int, Tuple[_VectorRead, VectorCombiner]] = {}   # grouping -> its vectorised inputs

    def run(self, batches: Iterator[Any]) -> Iterator[Any]:
        """The partition's output record batch (if any) for its input record batches."""
        import pyarrow as pa

        spec = self.spec
        self._take(batches)
        w_prev = self._w_prev()
        for (i, a, b), bundle in self.ranges:
            if i not in self.vector_reads:
                self.vector_reads[i] = _vector_read(spec, i)
            n = _read_range(spec, i, a, b, bundle, self.vector_reads[i], self.buffers,
                            self.vectors, w_prev)
            self.committed.update("counter", spec.reads[i][0], PROGRESS_NAMESPACE, ELEMENTS_READ, n)
        for unit in spec.units:
            if unit.stage is not None:
                unit.stage.finalizes = True   # finalize_bundles once the outputs are handed on
            reader = None
            if unit.side_step is not None:
                reader = _side_reader(unit, self.sides.get(unit.side_step, {}))
            _run_unit(spec, unit, self.buffers, self.committed, self.attempted, reader)
        out = self._emit(w_prev)
        if out.size:
            yield pa.RecordBatch.from_pydict(out.cols, schema=_arrow_schema())
        # every output of the partition is in Spark's hands, as the batch runner's tasks do
        # (a replayed micro-batch runs its bundles, and their finalizers, again)
        for unit in spec.units:
            if unit.stage is not None:
                unit.stage.finalize_bundles()

    def _take(self, batches: Iterator[Any]) -> None:
        """Sorts the partition's rows: the control row, source ranges, side-input contents,
        rows passed on as they are (reports, PCollections only later levels read, without
        unpickling) and the elements the level reads (`buffers`)."""
        spec = self.spec
        through = {pc for pc in spec.later
                   if pc not in spec.keyed and pc not in spec.spread and pc not in spec.broadcast
                   and not any(pc in u.inputs for u in spec.units)}
        buffers = self.buffers
        for batch in batches:
            cols = batch.to_pydict()
            for pc, bundle, seq, payload in zip(cols["pc"], cols["bundle"], cols["seq"],
                                                cols["payload"]):
                if pc == rows.CTL_PC:
                    self.control = payload
                elif pc == rows.READ_PC:
                    self.ranges.append((rows.loads(payload), bundle))
                elif pc == rows.SIDE_PC:
                    g, contents = rows.loads(payload)
                    self.sides[g] = contents
                elif pc == rows.REPORT_PC or pc in through:
                    self.passed.append((pc, bundle, seq, payload))
                else:
                    lst = buffers.setdefault(pc, [])
                    for wv in pickle.loads(payload):
                        lst.append((bundle, seq, wv))

    def _w_prev(self) -> Optional[List[int]]:
        """The input watermarks of the next level's groupings before the batch (a split lift
        combines only the inputs not behind its grouping's), if a split lift needs them."""
        if self.control is None or not any(split for _, _, split in self.spec.lifted.values()):
            return None
        return rows.loads(self.control).input_watermarks_before  # type: ignore[no-any-return]

    def _emit(self, w_prev: Optional[List[int]]) -> rows.Columns:
        """The partition's output rows."""
        spec = self.spec
        out = rows.Columns(spec.ctl_keys)
        for g, (vr, combiner) in self.vectors.items():
            for bk, payload in _vector_partials(g, vr, combiner, spec.buckets, self.committed):
                out.add(rows.KEYED, vr.out_pc, bk, 0, 0, payload)
        for pc, bundle, seq, payload in self.passed:
            out.add(rows.PASS, pc, None, bundle, seq, payload)
        for pc, items in self.buffers.items():
            self._emit_pc(out, pc, items, w_prev)
        if self.control is not None:
            if spec.ctl_keys is None:
                out.add(rows.PASS, rows.CTL_PC, None, 0, 0, self.control)
            else:
                for k in spec.ctl_keys:
                    out.add(rows.CTL, rows.CTL_PC, k, 0, 0, self.control)
        if self.committed.cells or self.attempted.cells:
            out.add(rows.PASS, rows.REPORT_PC, None, 0, 0,
                    rows.dumps(("metrics", self.committed, self.attempted)))
        return out

    def _emit_pc(self, out: rows.Columns, pc: int, items: List[Item], w_prev: Optional[List[int]]) -> None:
        """The rows of PCollection `pc`'s elements for those who read it next."""
        spec = self.spec
        readers = spec.keyed.get(pc, ())
        steps = spec.spread.get(pc, ())
        side = pc in spec.broadcast
        later = pc in spec.later
        if not readers and not later and not steps and not side:
            return
        items.sort(key=_ORDER)
        lifted = [(g, label) for g, label in readers if g in spec.lifted]
        if lifted:
            readers = tuple(r for r in readers if r[0] not in spec.lifted)
            for g, label in lifted:
                fn, windowing, _ = spec.lifted[g]
                for bk, payload in _partials(g, label, fn, windowing, items, spec.buckets,
                                             self.committed, _behind_of(spec, g, w_prev)):
                    out.add(rows.KEYED, pc, bk, 0, 0, payload)
        sdfs = {g: spec.splittable[g] for g, _ in readers if g in spec.splittable}
        if sdfs:   # splittable steps: their initial works, spread (`splittable.emit_inputs`)
            readers = tuple(r for r in readers if r[0] not in spec.splittable)
            emit_inputs(out, pc, items, sdfs, spec.buckets)
        if readers:
            _emit_keyed(out, pc, items, readers, spec.buckets)
        if steps:
            _emit_spread(out, pc, items, steps)
        if side or later:   # one row per bundle: its elements in order
            for bundle, wvs in _bundles(items):
                payload = pack(wvs)
                if side and spec.ctl_keys is not None:  # a side input: to every partition
                    for k in spec.ctl_keys:
                        out.add(rows.CTL, pc, k, bundle, 0, payload)
                if later:
                    out.add(rows.PASS, pc, None, bundle, 0, payload)


def _emit_keyed(out: rows.Columns, pc: int, items: List[Item], readers: Tuple[Tuple[int, str], ...],
                n_buckets: int) -> None:
    """One row per bucket of keys of the groupings `readers` reading `pc`: {key bytes: its
    elements with their bundles and places in them}."""
    buckets: Dict[bytes, Dict[bytes, List[Item]]] = {}
    for item in items:   # the per-element hot loop
        wv = item[2]
        for g, label in readers:
            _, _, kb = key_of(label, wv.value)
            bk = rows.bucket_key(g, kb, n_buckets)
            by_key = buckets.get(bk)
            if by_key is None:
                by_key = buckets[bk] = {}
            of_key = by_key.get(kb)
            if of_key is None:
                of_key = by_key[kb] = []
            of_key.append(item)
    for bk, by_key in buckets.items():
        out.add(rows.KEYED, pc, bk, 0, 0, pack(by_key))


def _emit_spread(out: rows.Columns, pc: int, items: List[Item], steps: Tuple[int, ...]) -> None:
    """One row per spread key of the side steps `steps` reading `pc` as main input: its
    elements with bundles and places."""
    keyed: Dict[bytes, List[Item]] = {}
    for item in items:
        # a side step's main input: any key, spread by content
        kb = bytes([zlib.crc32(pack([item[2]])) % _SPREAD])
        for g in steps:
            keyed.setdefault(rows.grouping_key(g, kb), []).append(item)
    for gk, lst in keyed.items():
        out.add(rows.KEYED, pc, gk, lst[0][0], lst[0][1], pack(lst))


_ORDER = itemgetter(0, 1)


def _bundles(items: List[Item]) -> Iterator[Tuple[int, List[WindowedValue]]]:
    """(bundle, its elements in order) of items sorted by bundle and place."""
    i, n = 0, len(items)
    while i < n:
        bundle = items[i][0]
        j = i
        while j < n and items[j][0] == bundle:
            j += 1
        yield bundle, [it[2] for it in items[i:j]]
        i = j


def _behind_of(spec: LevelSpec, g: int, w_prev: Optional[List[int]]) -> Optional[int]:
    """For a split lift (`kit.partial.Lift.SPLIT`) of grouping `g`: its input watermark before the
    batch; inputs behind it go as elements, not combined (with no control row, MAX_TIMESTAMP:
    all of them). None for a lift that combines every input."""
    if not spec.lifted[g][2]:
        return None
    return w_prev[g] if w_prev is not None else MAX_TIMESTAMP_MICROS


def _partials(g: int, label: str, fn_bytes: bytes, windowing: Any, items: List[Item],
              n_buckets: int, committed: MetricsContainer, behind_of: Optional[int] = None
              ) -> List[Tuple[bytes, bytes]]:
    """A lifted combine's map side: (row key, payload) per bucket of keys of the partition's
    elements, the payload `{key bytes: (key, [(window, accumulator, timestamp, inputs), ...],
    [(bundle, place, element), ...])}`: with `behind_of` (a split lift, `kit.partial.Lift.SPLIT`),
    the elements whose timestamp is behind that watermark are not combined but listed; the
    CombineFn's failures name the grouping."""
    with metrics_scope(committed, label), grouping_errors(label, "combining"):
        combine_fn = coders.loads(fn_bytes)
        combine_fn.setup()
        try:
            partial = PartialCombiner(label, combine_fn, windowing)
            behind: Dict[bytes, Tuple[Any, List[Item]]] = {}
            ahead = items
            if behind_of is not None:
                ahead = []
                for item in items:
                    if item[2].timestamp_us < behind_of:
                        k, _, kb = key_of(label, item[2].value)
                        behind.setdefault(kb, (k, []))[1].append(item)
                    else:
                        ahead.append(item)
            partial.add_all((wv.value, wv.timestamp_us, wv.windows) for _, _, wv in ahead)
            buckets: Dict[bytes, Dict[bytes, Any]] = {}
            for kb, k, cells in partial.emit_counted():
                got = behind.pop(kb, None)
                buckets.setdefault(rows.bucket_key(g, kb, n_buckets), {})[kb] = (
                    k, cells, got[1] if got is not None else ())
            for kb, (k, lst) in behind.items():
                buckets.setdefault(rows.bucket_key(g, kb, n_buckets), {})[kb] = (k, (), lst)
            return [(bk, pack(by_key)) for bk, by_key in buckets.items()]
        finally:
            combine_fn.teardown()


class _VectorRead(NamedTuple):
    """How a split read is read on the vectorised path (`_vector_read`)."""

    label: str          # the Read step
    source: Any         # an UnboundedSource that is an ArrowBatchSource
    chain: Any          # the stage reading it, compiled (`fastpath.VectorChain`)
    out_pc: int         # the stage's output, read only by the lifted combine `g`
    g: int
    g_label: str
    combine_fn: Any     # g's CombineFn, a built-in one `fastpath.vector_combiner` takes
    windowing: Any      # g's input windowing

    def combiner(self) -> VectorCombiner:
        """An empty VectorCombiner for one micro-batch's inputs."""
        made = vector_combiner(self.combine_fn, self.windowing)
        assert made is not None   # `_vector_read` checked that there is one
        return made


def _vector_read(spec: LevelSpec, i: int) -> Optional[_VectorRead]:
    """The vectorised path of split read `i`, as the Spark batch runner has it for
    `Read -> plain element-wise steps -> lifted CombinePerKey`: when its source reads Arrow
    batches (`iobase.ArrowBatchSource`), one stage alone reads its output, that stage is a chain
    of plain steps the fast path compiles, and its output goes only to a lifted combine of a
    built-in CombineFn (`fastpath.vector_combiner`). Else None: the elements go one by one."""
    label, source, pc = spec.reads[i]
    if not isinstance(source, ArrowBatchSource):
        return None
    if pc in spec.keyed or pc in spec.later or pc in spec.spread or pc in spec.broadcast:
        return None
    users = [u for u in spec.units if pc in u.inputs]
    if len(users) != 1 or users[0].stage is None or users[0].side_step is not None:
        return None
    unit = users[0]
    stage = unit.stage
    assert stage is not None
    if len(unit.outputs) != 1 or stage.materialized != unit.outputs or not stage.steps:
        return None
    out = unit.outputs[0]
    if stage.steps[-1].outputs[0][1] != out or out in spec.later or out in spec.spread \
            or out in spec.broadcast or any(out in u.inputs for u in spec.units):
        return None
    readers = spec.keyed.get(out, ())
    if len(readers) != 1 or readers[0][0] not in spec.lifted:
        return None
    g, g_label = readers[0]
    fn_bytes, windowing, _ = spec.lifted[g]
    combine_fn = coders.loads(fn_bytes)
    if vector_combiner(combine_fn, windowing) is None:
        return None
    chain = vector_chain(stage, source.row_attributes)
    if chain is None:
        return None
    return _VectorRead(label, source, chain, out, g, g_label, combine_fn, windowing)


def _read_range(spec: LevelSpec, i: int, a: Any, b: Any, bundle: int, vr: Optional[_VectorRead],
                buffers: Dict[int, List[Item]], vectors: Dict[int, Tuple[_VectorRead, VectorCombiner]],
                w_prev: Optional[List[int]]) -> int:
    """Reads positions a..b of split read `i` (its bundles numbered from `bundle`): its elements
    into `buffers`, or, on the vectorised path, the Arrow batches the chain evaluates and the
    combiner accepts into `vectors` (a batch with an input behind a split lift's watermark, or
    one the chain gives up on, goes element by element, in the same bundles); how many records
    it read."""
    label, source, out_pc = spec.reads[i]
    size = spec.bundle_size
    blocks = read_positions(label, source, a, b)   # the source's SDF wrapper (`kit.sdf`)
    if vr is None:
        lst = buffers.setdefault(out_pc, [])
        before = len(lst)
        for nth, wvs in enumerate(batched(expand_outputs(blocks), size)):
            for wv in wvs:
                lst.append((bundle + nth, 0, wv))
        return len(lst) - before
    behind_of = _behind_of(spec, vr.g, w_prev)
    got = vectors.get(vr.g)
    if got is None:
        got = vectors[vr.g] = (vr, vr.combiner())
    combiner = got[1]
    offset = 0
    for block in (wv.value for wv in blocks):   # RecordBlocks of Arrow batches
        batch = block.arrow
        vb = vr.chain.run(batch)
        if vb is not None and combiner.accepts(vb) and (
                behind_of is None or not vb.n or int(vb.ts_array().min()) >= behind_of):
            with grouping_errors(vr.g_label, "combining"):
                combiner.add(vb)
        else:
            try:
                records = block.values
            except Exception as exc:
                raise range_failure(label, a, b, exc) from exc
            lst = buffers.setdefault(out_pc, [])
            for j, record in enumerate(records):
                lst.append((bundle + (offset + j) // size, 0, to_windowed_value(record)))
        offset += batch.num_rows
    return offset


def _vector_partials(g: int, vr: _VectorRead, combiner: Any, n_buckets: int,
                     committed: MetricsContainer) -> List[Tuple[bytes, bytes]]:
    """The vectorised inputs' partial accumulators, as `_partials` sends them (with no inputs
    behind the watermark: those went element by element)."""
    with metrics_scope(committed, vr.g_label), grouping_errors(vr.g_label, "combining"):
        buckets: Dict[bytes, Dict[bytes, Any]] = {}
        label = vr.g_label
        for kb, k, cells in combiner.emit_counted(lambda k: grouping_key_bytes(label, k, k)):
            buckets.setdefault(rows.bucket_key(g, kb, n_buckets), {})[kb] = (k, cells, ())
        return [(bk, pack(by_key)) for bk, by_key in buckets.items()]




def _side_reader(unit: LevelUnit, contents: Dict[int, Dict[Any, list]]) -> SideInputReader:
    """The side inputs of a stage, from the contents its side step sent to this partition."""
    assert unit.stage is not None
    return side_reader(contents, stage_arguments(unit.stage))


def _run_unit(spec: LevelSpec, unit: LevelUnit, buffers: Dict[int, List[Item]],
              committed: MetricsContainer, attempted: MetricsContainer,
              reader: Optional[SideInputReader] = None) -> None:
    """Runs a stage over its input's bundles (in order), or passes a Flatten's inputs on."""
    if unit.stage is None:
        out = buffers.setdefault(unit.outputs[0], [])
        for pc in unit.inputs:
            out.extend(buffers.get(pc, ()))
        out.sort(key=_ORDER)
        return
    items = buffers.get(unit.inputs[0], [])
    if not items:
        return
    items.sort(key=_ORDER)
    stage = unit.stage
    seqs: Dict[int, int] = {}
    try:
        for bundle, wvs in _bundles(items):
            outs = stage.process_bundle(wvs, reader, spec.max_attempts, committed, attempted)
            for pc, lst in outs.items():
                if not lst:
                    continue
                dest = buffers.setdefault(pc, [])
                n = seqs.get(pc, 0)
                for wv in lst:
                    dest.append((bundle, n, wv))
                    n += 1
                seqs[pc] = n
    finally:
        stage.teardown()


_SCHEMA: Any = None


def _arrow_schema() -> Any:
    global _SCHEMA
    if _SCHEMA is None:
        import pyarrow as pa
        _SCHEMA = pa.schema([("kind", pa.int32()), ("pc", pa.int32()), ("key", pa.binary()),
                             ("bundle", pa.int64()), ("seq", pa.int64()), ("payload", pa.binary())])
    return _SCHEMA
