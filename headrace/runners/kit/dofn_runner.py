"""Running one element-wise step: a ParDo's DoFn (lifecycle, parameters, side inputs, tagged
outputs, dead letters) or a WindowInto's AssignWindows.

Every runner runs ParDo and WindowInto through `ParDoRunner` / `AssignWindowsRunner` (inside a
`kit.stage.FusedStage`), so parameter handling, output routing, retraction pass-through and
dead-letter routing are the same on every runner.
"""

from __future__ import annotations

import inspect
import logging
import traceback
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, cast

from headrace.errors import ElementError, InvalidArgumentError, _short_repr
from headrace.metrics.metric import CURRENT, set_current_step
from headrace.model import coders
from headrace.model.time import Timestamp
from headrace.model.window import WindowFn
from headrace.model.windowed import TimestampedValue, WindowedValue
from headrace.pipeline.dofn import (
    DoFn, _BundleFinalizerParam, _CallableWrapperDoFn, _DoFnParam, _RestrictionDoFnParam,
    _StateDoFnParam, _TimerDoFnParam, _WatermarkEstimatorDoFnParam,
    positional_slots,
)
from headrace.pipeline.pvalue import AsSideInput, TaggedOutput
from headrace.runners.kit.isolation import (
    Subprocess, TimeLimit, invoke, not_iterable_of_outputs, outputs_of,
)
from headrace.runners.kit.side_inputs import SideInputReader, empty_side_input_hint

Receiver = Callable[[WindowedValue], None]
_log = logging.getLogger(__name__)

#: The metrics (namespace "headrace") of a step's dead-letter output (`with_exception_handling`):
#: a counter of the elements routed to it and a gauge holding the last one's error, as text.
DEAD_LETTERS = "dead_letter_elements"
DEAD_LETTER_SAMPLE = "dead_letter_last_error"


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


def special_params(fn: Callable[..., Any]) -> Dict[str, Any]:
    """The special parameters (DoFn.TimestampParam, WindowParam, ..., the BundleFinalizerParam
    class) `fn` declares, by name."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return {}
    return {name: p.default for name, p in sig.parameters.items()
            if isinstance(p.default, _DoFnParam) or p.default is _BundleFinalizerParam}


class ParDoRunner:
    """Runs one ParDo step: lifecycle, parameters, side inputs, tagged outputs and dead letters."""

    def __init__(self, label: str, dofn: DoFn, args: Sequence[Any], kwargs: Dict[str, Any],
                 main_tag: Optional[str], dead_letter: Optional[Dict[str, Any]],
                 drop_unknown_tags: bool = False) -> None:
        self.label = label
        self.drop_unknown_tags = drop_unknown_tags
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
            special = special_params(dofn.fn)
        else:
            self.kind = "dofn"
            self.fn = dofn.process
            special = special_params(dofn.process)
        # with special parameters, extra arguments fill the other parameters by name, in Beam's
        # order (DoFn.SideInputParam ones included), so a special one declared first is skipped
        self.bind_names: Tuple[str, ...] = ()
        if special and self.args and self.kind not in ("maptuple", "flatmaptuple"):
            self.bind_names = tuple(positional_slots(self.fn, len(self.args)))
        special = {n: p for n, p in special.items() if p is not DoFn.SideInputParam}
        self.special = special
        # a stateful DoFn's key, window, state and timers (`kit.stateful.StatefulCore` sets it)
        self.user_context: Any = None
        #: A splittable DoFn's tracker view and watermark estimator, by parameter
        #: (`kit.sdf.SplittableProcessor` sets it).
        self.sdf_param: Optional[Callable[[_DoFnParam], Any]] = None
        self.wants_finalizer = any(p is _BundleFinalizerParam for p in special.values())
        #: The current bundle attempt's finalizer (DoFn.BundleFinalizerParam), if the DoFn asks for one.
        self.finalizer: Optional[_BundleFinalizerParam] = None
        self.has_side = any(isinstance(a, AsSideInput) for a in self.args) or any(
            isinstance(v, AsSideInput) for v in self.kwargs.values())
        self.explode = self.has_side or any(
            p is DoFn.WindowParam or isinstance(p, (_StateDoFnParam, _TimerDoFnParam))
            for p in special.values())
        self.simple = not (self.special or self.args or self.kwargs)
        dl = dead_letter or {}
        self.subprocess: Optional[Subprocess] = (
            Subprocess(label, coders.dumps(dofn), dl.get("timeout")) if dl.get("use_subprocess")
            else None)
        self.time_limit: Optional[TimeLimit] = (
            TimeLimit(label, dl["timeout"]) if dl.get("timeout") and self.subprocess is None else None)

    @classmethod
    def of(cls, spec: Any) -> "ParDoRunner":
        """The runner of a ParDo step given as a `kit.stage.StepSpec` (its DoFn deserialised)."""
        return cls(spec.label, coders.loads(spec.dofn), spec.args, spec.kwargs or {},
                   spec.main_tag, spec.dead_letter, spec.drop_unknown_tags)

    # ---- lifecycle ------------------------------------------------------------------

    def setup(self) -> None:
        """Calls the DoFn's setup once (in its subprocess, lazily, with use_subprocess)."""
        if not self._is_setup:
            if self.subprocess is None:
                self._call_lifecycle("setup", self.dofn.setup)
            self._is_setup = True

    def start_bundle(self) -> None:
        """Calls start_bundle (in its subprocess, lazily, with use_subprocess)."""
        if self.wants_finalizer:
            self.finalizer = _BundleFinalizerParam()  # a new attempt forgets the last one's callbacks
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
            if tag not in self.receivers and not self.drop_unknown_tags:
                raise InvalidArgumentError(
                    f"step {self.label!r} emitted to undeclared output tag {tag!r}; declare it with "
                    f".with_outputs({tag!r})")
            return
        for r in receivers:
            r(wv)

    def _resolve(self, wv: WindowedValue, window: Any) -> Tuple[tuple, dict]:
        if not self.has_side:  # the arguments as given, the DoFn's parameters filled in
            return self._resolve_special(self.special, wv, window, self.args, dict(self.kwargs))
        # None only when no argument is a side input (then `view` is never called)
        reader = cast(SideInputReader, self.side_inputs)
        args = tuple(reader.view(a, window) if isinstance(a, AsSideInput) else a for a in self.args)
        kwargs = {k: (reader.view(v, window) if isinstance(v, AsSideInput) else v)
                  for k, v in self.kwargs.items()}
        return self._resolve_special(self.special, wv, window, args, kwargs)

    def _resolve_special(self, special: Dict[str, _DoFnParam], wv: WindowedValue, window: Any,
                         args: tuple = (), kwargs: Optional[Dict[str, Any]] = None
                         ) -> Tuple[tuple, dict]:
        kwargs = {} if kwargs is None else kwargs
        for name, p in special.items():
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
                ctx = self.user_context
                kwargs[name] = ctx.key if ctx is not None else _key_of(wv.value)
            elif p is _BundleFinalizerParam:
                kwargs[name] = self.finalizer
            else:
                kwargs[name] = self._user_param(p)
        if self.bind_names:
            n = len(self.bind_names)
            kwargs.update(zip(self.bind_names, args[:n]))
            args = args[n:]
        return args, kwargs

    def _user_param(self, p: _DoFnParam) -> Any:
        """A stateful DoFn's parameter (a state cell, a timer or the firing timer's dynamic tag) or
        a splittable DoFn's (its tracker view, its watermark estimator)."""
        if isinstance(p, (_RestrictionDoFnParam, _WatermarkEstimatorDoFnParam)):
            if self.sdf_param is None:
                raise InvalidArgumentError(
                    f"step {self.label!r}: DoFn.{p.name} is only available to a splittable DoFn")
            return self.sdf_param(p)
        ctx = self.user_context
        if ctx is None:
            raise InvalidArgumentError(
                f"step {self.label!r}: DoFn.{p.name} is only available to a DoFn with state or "
                "timers, applied to a keyed PCollection")
        if isinstance(p, _StateDoFnParam):
            return ctx.state(p.spec)
        if isinstance(p, _TimerDoFnParam):
            return ctx.timer(p.spec)
        if p is DoFn.DynamicTimerTagParam:
            return ctx.tag
        raise InvalidArgumentError(f"step {self.label!r}: unknown DoFn parameter {p!r}")

    def invoke_callback(self, method: Callable[..., Any], wv: WindowedValue) -> None:
        """Calls a stateful DoFn's timer or window-expiration method with its parameters
        (resolved for `wv`: no value, the output timestamp, the window) and emits its outputs."""
        set_current_step(self.label)
        special = special_params(method)
        window = wv.windows[0]
        try:
            _, kwargs = self._resolve_special(special, wv, window)
            result = outputs_iter(method(**kwargs))
        except Exception as exc:
            raise ElementError(self.label, None, exc) from exc
        self._emit_all(result, wv)

    def bind(self) -> None:
        """Specialises `process` for the current receivers (call after setting `receivers`)."""
        self.process = self._general_process  # type: ignore[method-assign]
        dl = self.dead_letter
        # A Map with a dead-letter output and nothing else (no timeout, subprocess or partial
        # outputs) also takes the fast path: a failing call goes to `_failed`, as on the general
        # path, where the plain fast path raises.
        guarded = (dl is not None and self.kind == "map" and self.subprocess is None
                   and self.time_limit is None and not dl.get("partial"))
        if not (self.simple and (dl is None or guarded) and self.kind in ("map", "filter", "flatmap")):
            return
        failed = self._failed
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
                if guarded:
                    failed(wv, exc)
                    return
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
        step = dl.get("step") or self.label
        container = CURRENT.container
        if container is not None:
            container.update("counter", step, "headrace", DEAD_LETTERS, 1)
            container.update("gauge", step, "headrace", DEAD_LETTER_SAMPLE,
                             f"{type(exc).__name__}: {exc} (element {_short_repr(wv.value)})")
        bad = WindowedValue((wv.value, ErrorInfo(exc, step)), wv.timestamp_us,
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


def _key_of(value: Any) -> Any:
    """The key of a (key, value) element, for DoFn.KeyParam."""
    if isinstance(value, (tuple, list)) and len(value) == 2:
        return value[0]
    raise TypeError(
        f"the DoFn asks for DoFn.KeyParam, which is the key of a (key, value) element, but the "
        f"element is {_short_repr(value)}; key the input first, e.g. with beam.WithKeys(...)")


def start_bundle(runners: Sequence[Any], side_inputs: Optional[SideInputReader]) -> None:
    """Starts a bundle on a fused stage's runners: side inputs given to the ParDos, each set up
    (once) and then each started, in step order."""
    for r in runners:
        if isinstance(r, ParDoRunner):
            r.side_inputs = side_inputs
        r.setup()
    for r in runners:
        r.start_bundle()


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
