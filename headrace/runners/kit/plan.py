"""Planning: a pipeline's primitives as the units every runner executes, element-wise steps fused.

`plan(pipeline, runner)` walks `Pipeline.primitives()` (application order, so producers come
before consumers) and returns, in that order:

* `Stage`: ParDo and WindowInto steps fused into one tree rooted at one input PCollection.
  A step joins the stage that produced its input, or the stage already rooted at its input
  (siblings reading one PCollection fuse); a ParDo with side inputs starts a stage of its own
  (a runner may have to hold its input back until the side inputs are ready). A stage's
  outputs that leave it (read outside it, or by nobody) are *materialised*; the others pass
  from step to step by direct calls.
* `Primitive`: every other step, with its `kind` (a `Kind`): SOURCE (Create, Read of a
  BoundedSource), UNBOUNDED (Read of an UnboundedSource), TEST_STREAM, GROUPING (GroupByKey,
  CombinePerKey), FLATTEN, RESHUFFLE, STATEFUL (a ParDo whose DoFn has user state or timers:
  it runs per key, after its input is grouped by key, so it is never fused) and SPLITTABLE (a
  ParDo of a splittable DoFn: its elements' restrictions are split, placed and resumed by the
  runner, `kit.sdf`, so it is never fused either).

A runner that cannot execute a kind says so by leaving it out of `kinds`; `plan` then fails
with an error naming the step and what to do.
"""

from __future__ import annotations

import enum
from typing import Callable, Dict, FrozenSet, List, Optional, Tuple, Union

from headrace.errors import PipelineExecutionError
from headrace.io.iobase import Read, UnboundedSource
from headrace.pipeline.pipeline import AppliedPTransform, Pipeline
from headrace.pipeline.pvalue import AsSideInput, PCollection
from headrace.runners.kit.side_inputs import replace_views
from headrace.runners.kit.stage import FusedStage, StepSpec, serialize_dofn, step_spec
from headrace.testing.test_stream import TestStream
from headrace.transforms.core import (
    CombinePerKey, Create, Flatten, GroupByKey, ParDo, Reshuffle, WindowInto,
)

class Kind(enum.Enum):
    """The kind of a planned unit (and of what runners build from it); one name per concept.

    The values are the names a streaming checkpoint's plan shape records (`Kind.value`)."""

    SOURCE = "source"            # Create, or a Read of a BoundedSource: everything at once
    UNBOUNDED = "unbounded"      # a Read of an UnboundedSource: what it has, batch after batch
    TEST_STREAM = "test_stream"  # a TestStream: a scripted source
    GROUPING = "grouping"        # GroupByKey, CombinePerKey
    FLATTEN = "flatten"          # Flatten: elements passed on from several inputs
    RESHUFFLE = "reshuffle"      # Reshuffle: elements passed on (a fusion break)
    STATEFUL = "stateful"        # a ParDo with user state or timers, run per key
    SPLITTABLE = "splittable"    # a ParDo of a splittable DoFn, run restriction by restriction
    STAGE = "stage"              # ParDo / WindowInto steps fused into one `Stage`
    SIDE_STEP = "side_step"      # holds a stage's main input until its side inputs are ready
    CREATE = "create"            # a SOURCE that is a Create (its values travel with the plan)


#: The kinds of `Primitive` (`plan` makes no others).
ALL_KINDS: FrozenSet[Kind] = frozenset({Kind.SOURCE, Kind.UNBOUNDED, Kind.TEST_STREAM, Kind.GROUPING,
                                        Kind.FLATTEN, Kind.RESHUFFLE, Kind.STATEFUL,
                                        Kind.SPLITTABLE})

_KIND_OF = ((Create, Kind.SOURCE), (Read, Kind.SOURCE), (TestStream, Kind.TEST_STREAM),
            (GroupByKey, Kind.GROUPING), (CombinePerKey, Kind.GROUPING), (Flatten, Kind.FLATTEN),
            (Reshuffle, Kind.RESHUFFLE))


def _unique(pcolls: List[PCollection]) -> Tuple[PCollection, ...]:
    return tuple(dict.fromkeys(pcolls))


class Primitive:
    """A step executed on its own: a source, a TestStream, a grouping, a Flatten or a Reshuffle."""

    __slots__ = ("kind", "node")

    def __init__(self, kind: Kind, node: AppliedPTransform) -> None:
        self.kind = kind
        self.node = node

    @property
    def label(self) -> str:
        """The step's full label."""
        return self.node.full_label

    @property
    def inputs(self) -> Tuple[PCollection, ...]:
        """The main inputs."""
        return tuple(self.node.inputs)

    @property
    def side_inputs(self) -> List[AsSideInput]:
        """The side-input views."""
        return list(self.node.side_inputs)

    @property
    def outputs(self) -> Tuple[PCollection, ...]:
        """The outputs, ordered by PCollection id (the main output first)."""
        return tuple(sorted(_unique(list(self.node.outputs.values())), key=lambda pc: pc._id))

    def __repr__(self) -> str:
        return f"Primitive({self.kind.value}, {self.label!r})"


class Stage:
    """ParDo / WindowInto steps fused into a tree rooted at one input PCollection."""

    kind = Kind.STAGE

    def __init__(self, root: PCollection, counts: bool = False) -> None:
        self.root = root
        self.nodes: List[AppliedPTransform] = []
        self.counts = counts   # its FusedStage counts elements (`kit.stage.ELEMENTS`; --report)

    @property
    def label(self) -> str:
        """The labels of its steps, joined by " + "."""
        return " + ".join(n.full_label for n in self.nodes)

    @property
    def inputs(self) -> Tuple[PCollection, ...]:
        """The main input: the root."""
        return (self.root,)

    @property
    def side_inputs(self) -> List[AsSideInput]:
        """The side-input views of its steps."""
        return [s for n in self.nodes for s in n.side_inputs]

    @property
    def side_pcolls(self) -> Tuple[PCollection, ...]:
        """The PCollections its steps read as side inputs (each once)."""
        return _unique([s.pvalue for s in self.side_inputs])

    @property
    def outputs(self) -> Tuple[PCollection, ...]:
        """The materialised outputs (read outside the stage, or by nobody), ordered by id."""
        members = set(self.nodes)
        outs = _unique([pc for n in self.nodes for pc in n.outputs.values()])  # a tag may alias main
        leaving = (pc for pc in outs if not pc.consumers or any(c not in members for c in pc.consumers))
        return tuple(sorted(leaving, key=lambda pc: pc._id))

    def fused(self, arg: Optional[Callable[[AsSideInput], AsSideInput]] = None) -> FusedStage:
        """The stage as a `FusedStage` (steps as plain data, DoFns serialised).

        `arg`, when given, replaces each side-input view among the steps' arguments (a runner
        shipping the stage to workers swaps in views that pickle without the graph)."""
        steps: List[StepSpec] = []
        for n in self.nodes:
            t = n.transform
            spec = step_spec(n, serialize_dofn(n.full_label, t.fn) if isinstance(t, ParDo) else None)
            if arg is not None and n.side_inputs:
                args, kwargs = replace_views(spec.args, spec.kwargs or {}, arg)
                spec = spec._replace(args=args, kwargs=kwargs)
            steps.append(spec)
        return FusedStage(self.label, steps, self.root._id, [pc._id for pc in self.outputs],
                          self.counts)

    def __repr__(self) -> str:
        return f"Stage({self.label!r})"


Unit = Union[Stage, Primitive]


def kind_of(node: AppliedPTransform) -> Optional[Kind]:
    """The kind of a primitive that is not fused (None for ParDo / WindowInto and unknown ones)."""
    t = node.transform
    if isinstance(t, Read) and isinstance(t.source, UnboundedSource):
        return Kind.UNBOUNDED
    if isinstance(t, ParDo) and t.is_stateful:
        return Kind.STATEFUL
    if isinstance(t, ParDo) and t.is_splittable:
        return Kind.SPLITTABLE
    for cls, kind in _KIND_OF:
        if isinstance(t, cls):
            return kind
    return None


def plan(pipeline: Pipeline, runner: str, kinds: FrozenSet[Kind] = ALL_KINDS,
         hint: Optional[Dict[Kind, str]] = None) -> List[Unit]:
    """The pipeline's units in dependency order (see the module doc).

    `runner` names the runner in errors; `hint` maps a kind the runner cannot execute to what
    the user should do instead."""
    units: List[Unit] = []
    counts = counts_elements(pipeline)
    stage_of_pc: Dict[PCollection, Stage] = {}
    stage_by_root: Dict[PCollection, Stage] = {}
    for node in pipeline.primitives():
        t = node.transform
        if isinstance(t, WindowInto) or (isinstance(t, ParDo) and not t.is_stateful
                                         and not t.is_splittable):
            main = node.inputs[0]
            stage = None
            if not node.side_inputs:
                stage = stage_of_pc.get(main) or stage_by_root.get(main)
            if stage is None:
                stage = Stage(main, counts)
                if not node.side_inputs:
                    stage_by_root[main] = stage
                units.append(stage)
            stage.nodes.append(node)
            for pc in node.outputs.values():
                stage_of_pc[pc] = stage
            continue
        kind = kind_of(node)
        if kind is None:
            raise PipelineExecutionError(
                f"the {runner} cannot execute step {node.full_label!r} ({type(t).__name__}); it is "
                "not a known primitive", step=node.full_label)
        if kind not in kinds:
            why = (hint or {}).get(kind, "")
            raise PipelineExecutionError(
                f"the {runner} cannot execute step {node.full_label!r} ({type(t).__name__})"
                + (f": {why}" if why else ""), step=node.full_label)
        units.append(Primitive(kind, node))
    return units


def counts_elements(pipeline: Pipeline) -> bool:
    """Whether the pipeline's fused stages count their elements: a run report is asked for
    (`--report`, whose graph shows the counts per edge)."""
    options = getattr(pipeline, "options", None)
    return bool(options is not None and getattr(options, "report", None))
