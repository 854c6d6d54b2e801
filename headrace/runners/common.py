"""Runner-agnostic execution of element-wise steps: DoFn invocation, outputs, dead letters.

Every runner runs ParDo and WindowInto through `ParDoRunner` / `AssignWindowsRunner`, so
parameter handling, output routing, retraction pass-through and dead-letter routing are the
same on the local runner and on Spark executors.
"""

from __future__ import annotations

import inspect
import logging
import traceback
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple, cast

from headrace.errors import (
    DeadLetterThresholdError, ElementError, InvalidArgumentError, KeyEncodingError,
    PipelineExecutionError, _short_repr,
)
from headrace.metrics.metric import CURRENT, MetricsContainer, metrics_scope, set_current_step
from headrace.model import coders
from headrace.model.combine import BoundCombineFn, combine_values
from headrace.model.time import Timestamp
from headrace.model.time import MIN_TIMESTAMP_MICROS
from headrace.model.window import GLOBAL_WINDOWS_TUPLE, WindowFn, side_input_window
from headrace.model.windowed import TimestampedValue, WindowedValue
from headrace.pipeline.dofn import DoFn, _CallableWrapperDoFn, _DoFnParam
from headrace.pipeline.pvalue import AsSideInput, EmptySideInput, TaggedOutput
from headrace.runners.isolation import (
    Subprocess, TimeLimit, invoke, not_iterable_of_outputs, outputs_of,
)

Receiver = Callable[[WindowedValue], None]
_log = logging.getLogger(__name__)


class ErrorInfo(tuple):
    """Why an element went to the dead-letter output: (exception type, repr, traceback lines).

    Also carries `.step` (the failing step's label) and `.exception` (the exception itself).
    """

    step: str
    exception: Optional[BaseException]

    def __new__(cls, exc: BaseException, step: str) -> "ErrorInfo":
        lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
        self = super().__new__(cls, (type(exc), repr(exc), lines))
        self.step = step
        self.exception = exc
        return self

    def __reduce__(self):
        return (_error_info, (self[0], self[1], self[2], self.step))

    def __repr__(self) -> str:
        return f"ErrorInfo(step={self.step!r}, {self[1]})"


def _error_info(exc_type, exc_repr, lines, step):
    self = tuple.__new__(ErrorInfo, (exc_type, exc_repr, lines))
    self.step = step
    self.exception = None
    return self


def to_windowed_value(v: Any) -> WindowedValue:
    """A source's record as an element: a TimestampedValue keeps its time, others get the minimum."""
    if type(v) is TimestampedValue:
        return WindowedValue(v.value, v.timestamp_us, GLOBAL_WINDOWS_TUPLE)
    return WindowedValue(v, MIN_TIMESTAMP_MICROS, GLOBAL_WINDOWS_TUPLE)


def split_kv(label: str, value: Any) -> Tuple[Any, Any]:
    """The (key, value) of a grouping's input element, or an error naming the step."""
    try:
        k, v = value
    except (TypeError, ValueError):
        raise PipelineExecutionError(
            f"step {label!r} groups by key and needs (key, value) pairs, got "
            f"{_short_repr(value)}; map elements to 2-tuples first, e.g. "
            "beam.Map(lambda x: (key_of(x), x))", step=label, element=value) from None
    return k, v


def grouping_key_bytes(label: str, key: Any, element: Any) -> bytes:
    """The deterministic bytes a grouping groups `key` by, or an error naming the step."""
    try:
        return coders.encode_key(key)
    except KeyEncodingError as exc:
        raise PipelineExecutionError(f"step {label!r}: {exc}", step=label, element=element) from exc


def grouping_failure(label: str, exc: BaseException, doing: str = "combining or grouping"
                     ) -> PipelineExecutionError:
    """The error for a grouping step whose CombineFn or core failed (every runner raises this)."""
    return PipelineExecutionError(
        f"step {label!r} failed while {doing}: {type(exc).__name__}: {exc}; check its CombineFn",
        step=label)


class SideInputReader:
    """Reads materialised side inputs for a main-input window."""

    def __init__(self, contents: Dict[AsSideInput, Dict[Any, list]]) -> None:
        self._contents = contents
        self._cache: Dict[Tuple[int, Any], Any] = {}

    def view(self, side: AsSideInput, main_window: Any) -> Any:
        """The view (singleton, list, dict, ...) of `side` for the given main-input window."""
        sw = side_input_window(side.pvalue.windowing.windowfn, main_window)
        key = (id(side), sw)
        try:
            return self._cache[key]
        except KeyError:
            pass
        values = self._contents.get(side, {}).get(sw, [])
        v = self._cache[key] = side._view(values)
        return v


class SideInputCombiner:
    """A CombinePerKey's CombineFn whose extra arguments include side inputs, bound per window.

    Every runner computes such a combine's panes through this class: the per-key core groups
    the values of each key (or, for a lifted combine, the partial accumulators made by
    `bound(window)` before the shuffle) by window, and the value of a pane of window W is
    computed with the side inputs read for W (`side_input_window`), as a ParDo reads them.
    Every CombineFn method gets the side inputs' values in place of the views.
    """

    def __init__(self, label: str, combine_fn: Any, args: Sequence[Any],
                 kwargs: Dict[str, Any]) -> None:
        self.label = label
        self.combine_fn = combine_fn
        self.args = tuple(args)
        self.kwargs = dict(kwargs)
        #: Where the side inputs are read; set by the runner before the first pane.
        self.reader: Optional[SideInputReader] = None

    def setup(self) -> None:
        """Sets up the CombineFn."""
        self.combine_fn.setup()

    def teardown(self) -> None:
        """Tears down the CombineFn."""
        self.combine_fn.teardown()

    def bound(self, window: Any) -> BoundCombineFn:
        """The CombineFn with the side inputs' values for main-input window `window` bound."""
        reader = self.reader
        assert reader is not None, "SideInputCombiner.reader is not set"
        try:
            args = tuple(reader.view(a, window) if isinstance(a, AsSideInput) else a
                         for a in self.args)
            kwargs = {k: (reader.view(v, window) if isinstance(v, AsSideInput) else v)
                      for k, v in self.kwargs.items()}
        except Exception as exc:
            raise PipelineExecutionError(
                f"step {self.label!r} could not read its side inputs for window {window!r}: "
                f"{type(exc).__name__}: {exc}", step=self.label) from exc
        return BoundCombineFn(self.combine_fn, args, kwargs)

    def combine(self, window: Any, values: Sequence[Any]) -> Any:
        """The output of a pane of `window` holding `values` (the combine's inputs)."""
        fn = self.bound(window)
        try:
            return combine_values(fn, values)
        except Exception as exc:
            raise self._explained(exc, fn, window)

    def finish(self, window: Any, accumulators: Sequence[Any]) -> Any:
        """The output of a pane of `window` holding partial accumulators made by `bound(window)`."""
        fn = self.bound(window)
        try:
            accs = list(accumulators) or [fn.create_accumulator()]
            return fn.extract_output(fn.merge_accumulators(accs))
        except Exception as exc:
            raise self._explained(exc, fn, window)

    def _explained(self, exc: Exception, fn: BoundCombineFn, window: Any) -> Exception:
        """`exc`, or an error naming the step and the empty side input the CombineFn was given."""
        hint = empty_side_input_hint(self.args, self.kwargs, fn.args, fn.kwargs, window)
        if not hint:
            return exc
        err = PipelineExecutionError(
            f"step {self.label!r} failed while combining a pane of window {window!r}: "
            f"{type(exc).__name__}: {exc}. {hint}", step=self.label)
        err.__cause__ = exc
        return err


def empty_side_input_hint(views: Sequence[Any], view_kwargs: Dict[str, Any], args: Sequence[Any],
                          kwargs: Dict[str, Any], window: Any) -> str:
    """A hint for an error in user code that was given an EmptySideInput (else "")."""
    empty = [v for v, a in zip(views, args) if isinstance(a, EmptySideInput)]
    empty += [v for k, v in view_kwargs.items() if isinstance(kwargs.get(k), EmptySideInput)]
    if not empty:
        return ""
    names = ", ".join(repr(v) for v in empty)
    return (f"The side input {names} is empty in window {window!r}, so the step got "
            "pvalue.EmptySideInput() in its place (as in Beam); give the view a default, e.g. "
            "AsSingleton(pcoll, default_value=...), or test for pvalue.EmptySideInput")


def _special_params(fn: Callable[..., Any]) -> Dict[str, _DoFnParam]:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return {}
    return {name: p.default for name, p in sig.parameters.items()
            if isinstance(p.default, _DoFnParam)}


class ParDoRunner:
    """Runs one ParDo step: lifecycle, parameters, side inputs, tagged outputs and dead letters."""

    def __init__(self, label: str, dofn: DoFn, args: Sequence[Any], kwargs: Dict[str, Any],
                 main_tag: Optional[str], dead_letter: Optional[Dict[str, Any]]) -> None:
        self.label = label
        self.dofn = dofn
        self.args = tuple(args)
        self.kwargs = dict(kwargs)
        self.main_tag = main_tag
        self.dead_letter = dead_letter
        self.receivers: Dict[Optional[str], List[Receiver]] = {}
        self.side_inputs: Optional[SideInputReader] = None
        self._is_setup = False
        if isinstance(dofn, _CallableWrapperDoFn):
            self.kind = dofn.kind
            self.fn = dofn.fn
            special = _special_params(dofn.fn)
        else:
            self.kind = "dofn"
            self.fn = dofn.process
            special = _special_params(dofn.process)
        self.special = special
        self.has_side = any(isinstance(a, AsSideInput) for a in self.args) or any(
            isinstance(v, AsSideInput) for v in self.kwargs.values())
        self.explode = self.has_side or any(p is DoFn.WindowParam for p in special.values())
        self.simple = not (self.special or self.args or self.kwargs)
        dl = dead_letter or {}
        self.subprocess: Optional[Subprocess] = (
            Subprocess(label, coders.dumps(dofn), dl.get("timeout")) if dl.get("use_subprocess")
            else None)
        self.time_limit: Optional[TimeLimit] = (
            TimeLimit(label, dl["timeout"]) if dl.get("timeout") and self.subprocess is None else None)

    # ---- lifecycle ------------------------------------------------------------------

    def setup(self) -> None:
        """Calls the DoFn's setup once (in its subprocess, lazily, with use_subprocess)."""
        if not self._is_setup:
            if self.subprocess is None:
                self._call_lifecycle("setup", self.dofn.setup)
            self._is_setup = True

    def start_bundle(self) -> None:
        """Calls start_bundle (in its subprocess, lazily, with use_subprocess)."""
        if self.subprocess is None:
            self._call_lifecycle("start_bundle", self.dofn.start_bundle)

    def finish_bundle(self) -> None:
        """Calls finish_bundle and emits what it yields (WindowedValues)."""
        if self.subprocess is not None:
            sub = self.subprocess
            self._call_lifecycle("finish_bundle", lambda: sub.finish_bundle(CURRENT.container))
            return
        result = self._call_lifecycle("finish_bundle", self.dofn.finish_bundle)
        if result is None:
            return
        for o in result:
            tag = None
            if isinstance(o, TaggedOutput):
                tag, o = o.tag, o.value
            if not isinstance(o, WindowedValue):
                raise ElementError(self.label, None, InvalidArgumentError(
                    f"finish_bundle must yield WindowedValue(value, timestamp, windows), got {o!r}"),
                    "finish_bundle")
            self._send(tag, o)

    def teardown(self) -> None:
        """Calls teardown (errors are ignored: teardown is best effort)."""
        if self.time_limit is not None:
            self.time_limit.close()
        if self.subprocess is not None:
            self.subprocess.teardown()
            self._is_setup = False
        if self._is_setup:
            self._is_setup = False
            try:
                set_current_step(self.label)
                self.dofn.teardown()
            except Exception:
                pass

    def _call_lifecycle(self, phase: str, method: Callable[[], Any]) -> Any:
        set_current_step(self.label)
        try:
            return method()
        except ElementError:
            raise
        except Exception as exc:
            raise ElementError(self.label, None, exc, phase) from exc

    # ---- elements -------------------------------------------------------------------

    def _send(self, tag: Optional[str], wv: WindowedValue) -> None:
        if tag is not None and tag == self.main_tag:
            tag = None
        receivers = self.receivers.get(tag)
        if receivers is None:
            if tag not in self.receivers:
                raise InvalidArgumentError(
                    f"step {self.label!r} emitted to undeclared output tag {tag!r}; declare it with "
                    f".with_outputs({tag!r})")
            return
        for r in receivers:
            r(wv)

    def _resolve(self, wv: WindowedValue, window: Any) -> Tuple[tuple, dict]:
        # None only when no argument is a side input (then `view` is never called)
        reader = cast(SideInputReader, self.side_inputs)
        args = tuple(reader.view(a, window) if isinstance(a, AsSideInput) else a for a in self.args)
        kwargs = {k: (reader.view(v, window) if isinstance(v, AsSideInput) else v)
                  for k, v in self.kwargs.items()}
        for name, p in self.special.items():
            if p is DoFn.TimestampParam:
                kwargs[name] = Timestamp(micros=wv.timestamp_us)
            elif p is DoFn.WindowParam:
                kwargs[name] = window
            elif p is DoFn.PaneInfoParam:
                kwargs[name] = wv.pane_info
            elif p is DoFn.RetractionParam:
                kwargs[name] = wv.is_retraction
            elif p is DoFn.ElementParam:
                kwargs[name] = wv.value
            elif p is DoFn.KeyParam:
                kwargs[name] = wv.value[0]
        return args, kwargs

    def bind(self) -> None:
        """Specialises `process` for the current receivers (call after setting `receivers`)."""
        self.process = self._general_process  # type: ignore[method-assign]
        if not (self.simple and self.dead_letter is None and self.kind in ("map", "filter", "flatmap")):
            return
        fn = self.fn
        main = tuple(self.receivers.get(None, ()))
        label = self.label
        current = CURRENT
        kind = self.kind
        WV = WindowedValue
        TV = TimestampedValue
        send_one = main[0] if len(main) == 1 else None

        def process_map(wv: WindowedValue) -> None:
            current.step = label
            try:
                o = fn(wv.value)
            except Exception as exc:
                raise ElementError(label, wv.value, exc) from exc
            t = type(o)
            if t is TV:
                out = WV(o.value, o.timestamp_us, wv.windows, wv.pane_info, wv.is_retraction)
            elif t is TaggedOutput or isinstance(o, WV):
                self._emit_all((o,), wv)
                return
            else:
                out = WV(o, wv.timestamp_us, wv.windows, wv.pane_info, wv.is_retraction)
            if send_one is not None:
                send_one(out)
            else:
                for r in main:
                    r(out)

        def process_filter(wv: WindowedValue) -> None:
            current.step = label
            try:
                keep = fn(wv.value)
            except Exception as exc:
                raise ElementError(label, wv.value, exc) from exc
            if keep:
                for r in main:
                    r(wv)

        def process_flatmap(wv: WindowedValue) -> None:
            current.step = label
            try:
                result = fn(wv.value)
                if result is None:
                    return
                if isinstance(result, (str, bytes, dict)):
                    raise not_iterable_of_outputs(result)
                for o in result:
                    t = type(o)
                    if t is TV or t is TaggedOutput or isinstance(o, WV):
                        self._emit_all((o,), wv)
                        continue
                    out = WV(o, wv.timestamp_us, wv.windows, wv.pane_info, wv.is_retraction)
                    for r in main:
                        r(out)
                    current.step = label  # the generator resumes in this step
            except ElementError:
                raise
            except Exception as exc:
                raise ElementError(label, wv.value, exc) from exc

        self.process = {"map": process_map, "filter": process_filter,  # type: ignore[method-assign]
                        "flatmap": process_flatmap}[kind]

    def process(self, wv: WindowedValue) -> None:
        """Processes one element (once per window when the DoFn reads the window or side inputs)."""
        self._general_process(wv)

    def _general_process(self, wv: WindowedValue) -> None:
        set_current_step(self.label)
        if self.explode and len(wv.windows) != 1:
            for w in wv.windows:
                self._process_in(WindowedValue(wv.value, wv.timestamp_us, (w,), wv.pane_info,
                                               wv.is_retraction), w)
        else:
            self._process_in(wv, wv.windows[0] if wv.windows else None)

    def _process_in(self, wv: WindowedValue, window: Any) -> None:
        if self.dead_letter is not None:
            self._process_guarded(wv, window)
            return
        args: tuple = ()
        kwargs: Dict[str, Any] = {}
        try:
            if not self.simple:
                args, kwargs = self._resolve(wv, window)
            result = invoke(self.kind, self.fn, wv.value, args, kwargs)
            if result is None:
                return
            if isinstance(result, (str, bytes, dict)):
                raise not_iterable_of_outputs(result)
        except Exception as exc:
            raise ElementError(self.label, wv.value, exc,
                               hint=empty_side_input_hint(self.args, self.kwargs, args, kwargs, window)
                               ) from exc
        if not self.has_side:
            self._emit_all(result, wv)
            return
        try:
            self._emit_all(result, wv)  # a generator runs the user's code here
        except ElementError as err:
            if not err.hint:
                err.hint = empty_side_input_hint(self.args, self.kwargs, args, kwargs, window)
            raise

    # ---- with_exception_handling ----------------------------------------------------

    def _process_guarded(self, wv: WindowedValue, window: Any) -> None:
        """Processes one element of a ParDo with a dead-letter output (see with_exception_handling)."""
        dl = self.dead_letter
        assert dl is not None
        try:
            args, kwargs = ((), {}) if self.simple else self._resolve(wv, window)
            v, kind, fn = wv.value, self.kind, self.fn
            if self.subprocess is not None:
                result = self.subprocess.process(v, args, kwargs, CURRENT.container)
            elif self.time_limit is not None:
                result = self.time_limit.call(lambda: outputs_of(invoke(kind, fn, v, args, kwargs)))
            elif dl.get("partial"):
                self._emit_partially(wv, iter(outputs_iter(invoke(kind, fn, v, args, kwargs))))
                return
            else:
                result = outputs_of(invoke(kind, fn, v, args, kwargs))
        except Exception as exc:
            self._failed(wv, exc)
            return
        self._emit_all(result, wv)

    def _emit_partially(self, wv: WindowedValue, outputs: Any) -> None:
        """partial=True: emits each output as it is produced; a later failure keeps the earlier ones."""
        while True:
            try:
                o = next(outputs)
            except StopIteration:
                return
            except Exception as exc:
                self._failed(wv, exc)
                return
            self._emit_all((o,), wv)

    def _failed(self, wv: WindowedValue, exc: Exception) -> None:
        """Routes an element whose processing raised `exc_class` to the dead letter, or fails."""
        dl = self.dead_letter
        assert dl is not None
        if not isinstance(exc, dl["exc_class"]):
            raise ElementError(self.label, wv.value, exc) from exc
        callback = dl.get("on_failure_callback")
        if callback is not None:
            try:
                callback(exc, wv.value)
            except Exception as cb_exc:  # as in Beam: logged, not retried, the element still goes on
                _log.warning("step %r: on_failure_callback failed for element %s: %s: %s",
                             self.label, _short_repr(wv.value), type(cb_exc).__name__, cb_exc,
                             exc_info=True)
            set_current_step(self.label)
        bad = WindowedValue((wv.value, ErrorInfo(exc, dl.get("step") or self.label)), wv.timestamp_us,
                            wv.windows, wv.pane_info, wv.is_retraction)
        self._send(dl["tag"], bad)

    def _emit_all(self, result: Any, wv: WindowedValue) -> None:
        main = self.receivers.get(None, ())
        current, label = CURRENT, self.label
        try:
            for o in result:
                t = type(o)
                if t is TaggedOutput:
                    self._send(o.tag, self._wrap(o.value, wv))
                else:
                    out = self._wrap(o, wv)
                    for r in main:
                        r(out)
                current.step = label  # a generator resumes in this step
        except ElementError:
            raise
        except Exception as exc:
            raise ElementError(self.label, wv.value, exc) from exc

    @staticmethod
    def _wrap(o: Any, wv: WindowedValue) -> WindowedValue:
        t = type(o)
        if t is TimestampedValue:
            return WindowedValue(o.value, o.timestamp_us, wv.windows, wv.pane_info, wv.is_retraction)
        if isinstance(o, WindowedValue):
            return o
        return WindowedValue(o, wv.timestamp_us, wv.windows, wv.pane_info, wv.is_retraction)


def outputs_iter(result: Any) -> Any:
    """The outputs of a call as an iterable (nothing for None), or TypeError for a str/bytes/dict."""
    if result is None:
        return ()
    if isinstance(result, (str, bytes, dict)):
        raise not_iterable_of_outputs(result)
    return result


class AssignWindowsRunner:
    """Runs WindowInto: re-assigns each element's windows with the new WindowFn."""

    def __init__(self, label: str, windowfn: WindowFn) -> None:
        self.label = label
        self.windowfn = windowfn
        self.receivers: Dict[Optional[str], List[Receiver]] = {}

    def setup(self) -> None:
        """Nothing to set up."""

    def start_bundle(self) -> None:
        """Nothing to do per bundle."""

    def finish_bundle(self) -> None:
        """Nothing to flush."""

    def teardown(self) -> None:
        """Nothing to release."""

    def bind(self) -> None:
        """Specialises `process` for the current receivers."""
        main = tuple(self.receivers.get(None, ()))
        assign = self.windowfn._assign
        label = self.label
        WV = WindowedValue

        def process(wv: WindowedValue) -> None:
            try:
                windows = assign(wv.value, wv.timestamp_us, wv.windows)
            except Exception as exc:
                raise ElementError(label, wv.value, exc) from exc
            out = WV(wv.value, wv.timestamp_us, windows, wv.pane_info, wv.is_retraction)
            for r in main:
                r(out)

        self.process = process  # type: ignore[method-assign]

    def process(self, wv: WindowedValue) -> None:
        """Assigns windows to one element and passes it on."""
        try:
            windows = self.windowfn._assign(wv.value, wv.timestamp_us, wv.windows)
        except Exception as exc:
            raise ElementError(self.label, wv.value, exc) from exc
        out = WindowedValue(wv.value, wv.timestamp_us, windows, wv.pane_info, wv.is_retraction)
        for r in self.receivers.get(None, ()):
            r(out)


# ---- fused stages ----------------------------------------------------------------------------

class StepSpec(NamedTuple):
    """One element-wise step of a fused stage, as plain data a runner can ship to its workers."""

    label: str
    input: int                                   # id of the input PCollection
    outputs: Tuple[Tuple[Optional[str], int], ...]  # (output tag, PCollection id)
    windowfn: Optional[WindowFn]                 # WindowInto: the new WindowFn (else None)
    dofn: Optional[bytes]                        # ParDo: the serialised DoFn (else None)
    args: tuple = ()
    kwargs: Optional[Dict[str, Any]] = None
    main_tag: Optional[str] = None
    dead_letter: Optional[Dict[str, Any]] = None


def step_spec(node: Any, pickled_dofn: Optional[bytes]) -> StepSpec:
    """The StepSpec of a ParDo or WindowInto application (`pickled_dofn` from `serialize_dofn`)."""
    t = node.transform
    outputs = tuple((tag, pc._id) for tag, pc in node.outputs.items())
    if pickled_dofn is None:  # WindowInto
        return StepSpec(node.full_label, node.inputs[0]._id, outputs, t.windowing.windowfn, None)
    return StepSpec(node.full_label, node.inputs[0]._id, outputs, None, pickled_dofn, tuple(t.args),
                    dict(t.kwargs), t.main_tag, t.dead_letter)


def serialize_dofn(label: str, fn: Any) -> bytes:
    """The DoFn serialised for its workers, or an error saying how to make it serialisable."""
    try:
        return coders.dumps(fn)
    except Exception as exc:
        raise PipelineExecutionError(
            f"step {label!r}: its DoFn cannot be serialised ({type(exc).__name__}: {exc}); keep "
            "unpicklable objects such as connections out of the DoFn's constructor and create "
            "them in setup()", step=label) from exc


class FusedStage:
    """A fused tree of element-wise steps run bundle by bundle, with whole-bundle retries.

    Every runner executes ParDo / WindowInto chains through this class (the local runner in
    its process, the Spark runner inside each task), so lifecycle, retries and metrics are
    the same everywhere. A bundle's outputs are returned only when the bundle succeeded; a
    failed attempt's outputs and metric updates (other than `attempted`) are discarded and
    the stage's DoFn instances torn down, so fused steps fail together (coupled failure).
    """

    def __init__(self, label: str, steps: Sequence[StepSpec], root: int,
                 materialized: Sequence[int]) -> None:
        self.label = label
        self.steps = tuple(steps)
        self.root = root
        self.materialized = tuple(materialized)
        self.runners: Optional[List[Any]] = None

    def _build(self) -> List[Any]:
        runners: List[Any] = []
        for s in self.steps:
            if s.windowfn is not None:
                runners.append(AssignWindowsRunner(s.label, s.windowfn))
            else:
                assert s.dofn is not None  # a step is a WindowInto or a ParDo
                runners.append(ParDoRunner(s.label, coders.loads(s.dofn), s.args, s.kwargs or {},
                                           s.main_tag, s.dead_letter))
        return runners

    def _wire(self, runners: List[Any], outs: Dict[int, List[WindowedValue]]) -> List[Receiver]:
        consumers_of: Dict[int, List[Any]] = {}
        for s, r in zip(self.steps, runners):
            consumers_of.setdefault(s.input, []).append(r)
        for s, r in reversed(list(zip(self.steps, runners))):  # consumers bind before producers
            rec: Dict[Optional[str], List[Any]] = {}
            for tag, pc in s.outputs:
                lst = [c.process for c in consumers_of.get(pc, [])]
                if pc in outs:
                    lst.append(outs[pc].append)
                if isinstance(r, ParDoRunner) and tag is not None and tag == r.main_tag:
                    continue
                rec[tag] = lst
            r.receivers = rec
            r.bind()
        return [r.process for r in consumers_of.get(self.root, [])]

    def process_bundle(self, bundle: Sequence[WindowedValue], side_inputs: Optional[SideInputReader],
                       max_attempts: int, committed: MetricsContainer,
                       attempted: MetricsContainer) -> Dict[int, List[WindowedValue]]:
        """Runs one bundle through every step (retrying it whole); returns outputs by PCollection id."""
        attempts = 0
        while True:
            attempts += 1
            container = MetricsContainer()
            outs: Dict[int, List[WindowedValue]] = {pc: [] for pc in self.materialized}
            try:
                if self.runners is None:
                    self.runners = self._build()
                runners = self.runners
                roots = self._wire(runners, outs)
                with metrics_scope(container, self.label):
                    for r in runners:
                        if isinstance(r, ParDoRunner):
                            r.side_inputs = side_inputs
                        r.setup()
                    for r in runners:
                        r.start_bundle()
                    if len(roots) == 1:
                        proc = roots[0]
                        for wv in bundle:
                            proc(wv)
                    else:
                        for wv in bundle:
                            for proc in roots:
                                proc(wv)
                    for r in runners:
                        r.finish_bundle()
            except ElementError as err:
                attempted.merge(container)
                self.teardown()
                if isinstance(err.cause, DeadLetterThresholdError):  # a verdict, not a flaky failure
                    raise err.cause
                if attempts >= max_attempts:
                    hint = f" {err.hint}." if err.hint else ""
                    raise PipelineExecutionError(
                        f"step {err.step!r} failed in {err.phase} on element "
                        f"{_short_repr(err.element)} after {attempts} attempt(s) of its bundle: "
                        f"{type(err.cause).__name__}: {err.cause}.{hint} Fix the step, or route failing "
                        "elements to a dead-letter output with .with_exception_handling()",
                        step=err.step, element=err.element, attempts=attempts) from err.cause
                _log.warning("bundle of %d elements failed in step %r (attempt %d of %d); retrying: %s",
                             len(bundle), err.step, attempts, max_attempts, err.cause)
                continue
            attempted.merge(container)
            committed.merge(container)
            return outs

    def teardown(self) -> None:
        """Tears down every DoFn instance (a later bundle builds fresh ones)."""
        if self.runners is None:
            return
        with metrics_scope(None, self.label):
            for r in self.runners:
                r.teardown()
        self.runners = None
