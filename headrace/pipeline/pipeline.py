"""Pipeline: the graph of applied transforms, built with `|` and run by a runner."""

from __future__ import annotations

import enum
from typing import Any, Dict, Iterator, List, Optional, Tuple

from headrace.errors import (
    DuplicateLabelError, InvalidArgumentError, PipelineConstructionError, TypeCheckError,
)
from headrace.pipeline.ptransform import PTransform, _NamedPTransform, input_type_conflict
from headrace.pipeline.pvalue import AsSideInput, DoOutputsTuple, PBegin, PCollection, PDone, PValue
from headrace.pipeline.runner_registry import create_runner
from headrace.typehints.typehints import type_name


class AppliedPTransform:
    """One application of a transform in the graph: its full label, inputs, outputs and parts."""

    def __init__(self, parent: Optional["AppliedPTransform"], transform: Optional[PTransform],
                 full_label: str, inputs: Tuple[PCollection, ...],
                 side_inputs: Tuple[AsSideInput, ...] = ()) -> None:
        self.parent = parent
        self.transform = transform
        self.full_label = full_label
        self.inputs = inputs
        self.side_inputs = side_inputs
        self.outputs: Dict[Optional[str], PCollection] = {}
        self.parts: List["AppliedPTransform"] = []

    def is_primitive(self) -> bool:
        """True for a step runners execute directly (it has no sub-steps)."""
        return bool(getattr(self.transform, "_primitive", False))

    def walk(self) -> Iterator["AppliedPTransform"]:
        """This node and all nodes below it, in application order."""
        yield self
        for p in self.parts:
            yield from p.walk()

    def __repr__(self) -> str:
        return f"<AppliedPTransform {self.full_label!r}>"


class PipelineState(str, enum.Enum):
    """The state of a pipeline run: Beam's states, of which headrace's runners use RUNNING,
    DONE, FAILED and CANCELLED."""

    UNKNOWN = "UNKNOWN"
    STARTING = "STARTING"
    STOPPED = "STOPPED"
    RUNNING = "RUNNING"
    DONE = "DONE"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    UPDATED = "UPDATED"
    DRAINING = "DRAINING"
    DRAINED = "DRAINED"
    PENDING = "PENDING"
    CANCELLING = "CANCELLING"
    RESOURCE_CLEANING_UP = "RESOURCE_CLEANING_UP"
    UNRECOGNIZED = "UNRECOGNIZED"

    @classmethod
    def is_terminal(cls, state: "PipelineState") -> bool:
        """Whether a run in `state` has ended (STOPPED, DONE, FAILED, CANCELLED, UPDATED, DRAINED)."""
        return state in (cls.STOPPED, cls.DONE, cls.FAILED, cls.CANCELLED, cls.UPDATED, cls.DRAINED)


#: The run report's class (`--report`), found by name: the report builds on the runners, which
#: build on this module.
REPORTER = "headrace.report:RunReport"


class PipelineResult:
    """The outcome of `Pipeline.run()`: its state and its metrics."""

    def __init__(self, state: PipelineState, metrics: Any = None, error: Optional[BaseException] = None):
        self._state = state
        self._metrics = metrics
        self._error = error

    @property
    def state(self) -> PipelineState:
        """DONE after a successful run, FAILED after an error."""
        return self._state

    @property
    def error(self) -> Optional[BaseException]:
        """The error a failed run raised (`wait_until_finish` raises it again), else None."""
        return self._error

    def wait_until_finish(self, duration: Optional[float] = None) -> PipelineState:
        """Blocks until the run ends, for at most `duration` milliseconds (Beam's unit), and returns
        its state.

        Runs here are synchronous: they have ended when `run()` returns, so this returns at once.
        """
        if self._error is not None:
            raise self._error
        return self._state

    def cancel(self) -> PipelineState:
        """Runs here finish before `run()` returns, so there is nothing to cancel."""
        return self._state

    def metrics(self) -> Any:
        """The run's metric results; query them with `metrics().query(MetricsFilter()...)`."""
        return self._metrics


class Pipeline:
    """A graph of transforms; use it as a context manager to run it on exit."""

    def __init__(self, runner: Any = None, options: Any = None, argv: Optional[List[str]] = None) -> None:
        from headrace.options.pipeline_options import PipelineOptions, StandardOptions
        if options is None:
            options = PipelineOptions(argv or [])
        elif not isinstance(options, PipelineOptions):
            raise InvalidArgumentError(
                f"Pipeline(options=...) needs a PipelineOptions, got {type(options).__name__}")
        self._options = options
        if runner is None:
            runner = options.view_as(StandardOptions).runner
        self.runner = runner
        self._root = AppliedPTransform(None, None, "", ())
        self._stack: List[AppliedPTransform] = [self._root]
        self._labels: set = set()
        self._ids = 0
        self._ran = False

    @property
    def applied_labels(self) -> frozenset:
        """The full labels of every transform applied so far (Beam's `Pipeline.applied_labels`)."""
        return frozenset(self._labels)

    @property
    def options(self) -> Any:
        """This pipeline's PipelineOptions."""
        return self._options

    @property
    def allow_unsafe_triggers(self) -> bool:
        """True when --allow_unsafe_triggers was given (Beam's TypeOptions flag)."""
        from headrace.options.pipeline_options import TypeOptions
        return bool(self._options.view_as(TypeOptions).allow_unsafe_triggers)

    def _next_id(self) -> int:
        self._ids += 1
        return self._ids

    # ---- building -------------------------------------------------------------------

    def apply(self, transform: Any, pvalueish: Any = None, label: Optional[str] = None) -> Any:
        """Applies `transform` to `pvalueish` (a PCollection, tuple/dict of them, or the pipeline)."""
        if isinstance(transform, _NamedPTransform):
            return self.apply(transform.transform, pvalueish, label or transform.label)
        if not isinstance(transform, PTransform):
            raise PipelineConstructionError(
                f"expected a PTransform to apply, got {type(transform).__name__} {transform!r}; "
                "did you forget to call it, e.g. beam.GroupByKey() rather than beam.GroupByKey?")
        label = label or transform.label
        parent = self._stack[-1]
        full_label = f"{parent.full_label}/{label}" if parent.full_label else label
        if full_label in self._labels:
            raise DuplicateLabelError(
                f"a transform with label {full_label!r} already exists in the pipeline; give each "
                f"application a unique label: pcoll | 'MyUniqueLabel' >> {type(transform).__name__}(...)")
        if pvalueish is None or isinstance(pvalueish, Pipeline):
            if pvalueish is not None and pvalueish is not self:
                raise PipelineConstructionError(f"step {full_label!r} is applied to another pipeline")
            pvalueish = PBegin(self)
        inputs = self._main_inputs(pvalueish, full_label)
        self._check_input_type(transform, inputs, full_label)
        side = tuple(getattr(transform, "side_inputs", ()) or ())
        for s in side:
            if s.pvalue.pipeline is not self:
                raise PipelineConstructionError(
                    f"step {full_label!r} reads side input {s!r} from another pipeline")
        node = AppliedPTransform(parent, transform, full_label, inputs, side)
        self._labels.add(full_label)
        parent.parts.append(node)
        self._stack.append(node)
        transform.pipeline = self
        try:
            result = transform.expand(pvalueish)
        finally:
            self._stack.pop()
        if result is None:
            result = PDone(self)
        node.outputs = self._outputs_of(result, full_label)
        self._set_output_type(transform, result)
        if node.is_primitive():
            for pc in inputs:
                pc.consumers.append(node)
            for s in side:
                s.pvalue.consumers.append(node)
        return result

    def _check_input_type(self, transform: PTransform, inputs: Tuple[PCollection, ...],
                          label: str) -> None:
        if not inputs or not getattr(self._options, "pipeline_type_check", True):
            return
        declared = transform.get_input_type()
        if declared is None:
            return
        for pc in inputs:
            if input_type_conflict(declared, pc.element_type):
                raise TypeCheckError(
                    f"step {label!r} declares its input type as {type_name(declared)}, but its "
                    f"input comes from step {pc.label!r}, whose elements are "
                    f"{type_name(pc.element_type)}; make the two agree: fix the type hint of "
                    f"{label!r} (with_input_types, a decorator or an annotation) or the output "
                    f"of {pc.label!r} (with_output_types), or pass --no_pipeline_type_check")

    def _set_output_type(self, transform: PTransform, result: Any) -> None:
        """A composite's declared output type becomes its output's element type, if unknown."""
        declared = transform.get_output_type()
        if declared is not None and isinstance(result, PCollection) and result.element_type is None:
            result.element_type = declared

    def _main_inputs(self, pvalueish: Any, label: str) -> Tuple[PCollection, ...]:
        if isinstance(pvalueish, PBegin):
            return ()
        if isinstance(pvalueish, PCollection):
            items: List[Any] = [pvalueish]
        elif isinstance(pvalueish, dict):
            items = list(pvalueish.values())
        elif isinstance(pvalueish, (list, tuple)):
            items = list(pvalueish)
        elif isinstance(pvalueish, DoOutputsTuple):
            items = list(pvalueish)
        else:
            raise PipelineConstructionError(
                f"step {label!r} cannot take {type(pvalueish).__name__} {pvalueish!r} as input")
        for pc in items:
            if not isinstance(pc, PCollection):
                raise PipelineConstructionError(
                    f"step {label!r} got {type(pc).__name__} {pc!r} among its inputs; only "
                    "PCollections can be inputs")
            if pc.pipeline is not self:
                raise PipelineConstructionError(
                    f"step {label!r} is applied to {pc.label!r}, which belongs to another pipeline")
        return tuple(items)

    def _outputs_of(self, result: Any, label: str) -> Dict[Optional[str], PCollection]:
        if isinstance(result, PCollection):
            return {None: result}
        if isinstance(result, DoOutputsTuple):
            return dict(result._outputs)
        if isinstance(result, dict):
            return {str(k): v for k, v in result.items() if isinstance(v, PCollection)}
        if isinstance(result, (list, tuple)):
            return {str(i): v for i, v in enumerate(result) if isinstance(v, PCollection)}
        if isinstance(result, PValue):
            return {}
        if isinstance(result, AsSideInput):  # e.g. CombineGlobally(...).as_singleton_view()
            return {None: result.pvalue}
        raise PipelineConstructionError(
            f"the expand() of step {label!r} returned {type(result).__name__} {result!r}; it must "
            "return a PCollection, a tuple/dict of PCollections, or None")

    def current_transform(self) -> AppliedPTransform:
        """The node being expanded (primitives attach their outputs to it)."""
        return self._stack[-1]

    def new_pcollection(self, windowing: Any, is_bounded: bool = True, tag: Optional[str] = None,
                        element_type: Any = None) -> PCollection:
        """Creates an output PCollection of the transform being expanded."""
        return PCollection(self, self._stack[-1], tag, windowing, is_bounded, element_type)

    def transforms(self) -> List[AppliedPTransform]:
        """All applied transforms in application order (composites and primitives)."""
        return [n for n in self._root.walk() if n is not self._root]

    def primitives(self) -> List[AppliedPTransform]:
        """The primitive steps in topological (application) order."""
        return [n for n in self.transforms() if n.is_primitive()]

    def to_dot(self, expand: bool = False) -> str:
        """The pipeline's graph in Graphviz's DOT language: a box per top-level step (every
        primitive inside its composites' clusters with `expand`); see `pipeline.graph`."""
        from headrace.pipeline.graph import to_dot
        return to_dot(self, expand)

    # ---- running --------------------------------------------------------------------

    def run(self, test_runner_api: Any = None) -> PipelineResult:
        """Runs the pipeline with its runner and returns the result.

        `test_runner_api` is Beam's switch for round-tripping the pipeline through its portable
        representation before running it, a check of that representation; headrace has none,
        so there is nothing to round-trip and the result is the same.
        """
        from headrace.options.pipeline_options import check_supported
        check_supported(self._options)
        runner = create_runner(self.runner)
        self._ran = True
        report = self._report()
        if report is None:
            return runner.run_pipeline(self, self._options)
        try:
            result = runner.run_pipeline(self, self._options)
        except BaseException as exc:
            report.finish(None, exc)
            raise
        report.attach(result)
        return result

    def _report(self) -> Any:
        """The run report asked for with --report (`headrace.report.RunReport`), else None."""
        from headrace.options.pipeline_options import ReportOptions
        options = self._options.view_as(ReportOptions)
        if not options.report:
            return None
        import importlib
        module, name = REPORTER.split(":")
        return getattr(importlib.import_module(module), name)(self, options)

    def __enter__(self) -> "Pipeline":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.run().wait_until_finish()

    def __or__(self, transform: Any) -> Any:
        return self.apply(transform)
