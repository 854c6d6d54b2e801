"""Runner-agnostic execution of element-wise steps: DoFn invocation, outputs, dead letters.

Every runner runs ParDo and WindowInto through `ParDoRunner` / `AssignWindowsRunner`, so
parameter handling, output routing, retraction pass-through and dead-letter routing are the
same on the local runner and on Spark executors.
"""

from __future__ import annotations

import inspect
import traceback
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from headrace.errors import ElementError, InvalidArgumentError
from headrace.metrics.metric import CURRENT, set_current_step
from headrace.model.time import Timestamp
from headrace.model.window import WindowFn, side_input_window
from headrace.model.windowed import TimestampedValue, WindowedValue
from headrace.pipeline.dofn import DoFn, _CallableWrapperDoFn, _DoFnParam
from headrace.pipeline.pvalue import AsSideInput, TaggedOutput

Receiver = Callable[[WindowedValue], None]


class ErrorInfo(tuple):
    """Why an element went to the dead-letter output: (exception type, repr, traceback lines).

    Also carries `.step` (the failing step's label) and `.exception` (the exception itself).
    """

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

    # ---- lifecycle ------------------------------------------------------------------

    def setup(self) -> None:
        """Calls the DoFn's setup once."""
        if not self._is_setup:
            self._call_lifecycle("setup", self.dofn.setup)
            self._is_setup = True

    def start_bundle(self) -> None:
        """Calls start_bundle."""
        self._call_lifecycle("start_bundle", self.dofn.start_bundle)

    def finish_bundle(self) -> None:
        """Calls finish_bundle and emits what it yields (WindowedValues)."""
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
        reader = self.side_inputs
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
                    raise _not_iterable_of_outputs(result)
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
        kind = self.kind
        try:
            args, kwargs = ((), {}) if self.simple else self._resolve(wv, window)
            v = wv.value
            if kind == "map":
                result: Any = (self.fn(v, *args, **kwargs),)
            elif kind == "filter":
                result = (v,) if self.fn(v, *args, **kwargs) else ()
            elif kind == "maptuple":
                result = (self.fn(*v, *args, **kwargs),)
            elif kind == "flatmaptuple":
                result = self.fn(*v, *args, **kwargs)
            else:
                result = self.fn(v, *args, **kwargs)
            if result is None:
                return
            if isinstance(result, (str, bytes, dict)):
                raise _not_iterable_of_outputs(result)
            if self.dead_letter is not None:
                result = list(result)
        except Exception as exc:
            dl = self.dead_letter
            if dl is not None and isinstance(exc, dl["exc_class"]):
                bad = WindowedValue((wv.value, ErrorInfo(exc, self.label)), wv.timestamp_us,
                                    wv.windows, wv.pane_info, wv.is_retraction)
                self._send(dl["tag"], bad)
                return
            raise ElementError(self.label, wv.value, exc) from exc
        self._emit_all(result, wv)

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


def _not_iterable_of_outputs(result: Any) -> TypeError:
    return TypeError(
        f"process returned a {type(result).__name__}; it must return or yield an iterable "
        f"of outputs (wrap a single output in a list, e.g. [{_short(result)}])")


def _short(v: Any) -> str:
    r = repr(v)
    return r if len(r) < 40 else r[:37] + "..."


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
