"""DoFn: the user's per-element code, with Beam's lifecycle and special parameters."""

from __future__ import annotations

import inspect
import logging
from typing import Any, Callable, Dict, Iterable, List, Optional

_log = logging.getLogger(__name__)


class _DoFnParam:
    """A marker default value asking the runner to pass something other than the element."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"DoFn.{self.name}"

    def __reduce__(self):
        return (_param_by_name, (self.name,))


_PARAMS: Dict[str, "_DoFnParam"] = {}


def _param(name: str) -> _DoFnParam:
    p = _PARAMS[name] = _DoFnParam(name)
    return p


def _param_by_name(name: str) -> _DoFnParam:
    return _PARAMS[name]


class _StateDoFnParam(_DoFnParam):
    """`DoFn.StateParam(spec)`: the runner passes the state cell `spec` of the current key and window."""

    __slots__ = ("spec",)

    def __init__(self, spec: Any) -> None:
        from headrace.pipeline.userstate import StateSpec
        if not isinstance(spec, StateSpec):
            raise TypeError(f"DoFn.StateParam needs a StateSpec (e.g. BagStateSpec('buffer')), got {spec!r}")
        super().__init__("StateParam")
        self.spec = spec

    def __repr__(self) -> str:
        return f"DoFn.StateParam({self.spec!r})"

    def __reduce__(self):
        return (_StateDoFnParam, (self.spec,))


class _TimerDoFnParam(_DoFnParam):
    """`DoFn.TimerParam(spec)`: the runner passes the timer `spec` of the current key and window."""

    __slots__ = ("spec",)

    def __init__(self, spec: Any) -> None:
        from headrace.pipeline.userstate import TimerSpec
        if not isinstance(spec, TimerSpec):
            raise TypeError(f"DoFn.TimerParam needs a TimerSpec, got {spec!r}")
        super().__init__("TimerParam")
        self.spec = spec

    def __repr__(self) -> str:
        return f"DoFn.TimerParam({self.spec!r})"

    def __reduce__(self):
        return (_TimerDoFnParam, (self.spec,))


class _BundleFinalizerParam(_DoFnParam):
    """A bundle's finalizer: `register(callback)` callbacks run once the bundle has committed.

    A DoFn asks for one with `finalizer=DoFn.BundleFinalizerParam` (the class itself, as in
    Beam); the runner passes a fresh instance per bundle attempt. The callbacks registered
    during an attempt run, in order, after that attempt succeeded and its outputs were handed
    on (see docs/beam-compatibility.md for when that is on each runner); those of a failed or
    abandoned attempt never run. A callback that raises is logged and the others still run.
    """

    __slots__ = ("_callbacks",)

    def __init__(self) -> None:
        super().__init__("BundleFinalizerParam")
        self._callbacks: List[Callable[[], Any]] = []

    def register(self, callback: Callable[[], Any]) -> None:
        """Asks for `callback()` to be called once the current bundle has committed."""
        if not callable(callback):
            raise TypeError(
                f"BundleFinalizerParam.register needs a callable taking no arguments, got {callback!r}")
        self._callbacks.append(callback)

    def finalize_bundle(self) -> None:
        """Calls the registered callbacks in order (each error logged), then forgets them."""
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            try:
                callback()
            except Exception as exc:  # as in Beam: logged, the other callbacks still run
                _log.warning("a bundle finalization callback %r failed: %s: %s", callback,
                             type(exc).__name__, exc, exc_info=True)

    def has_callbacks(self) -> bool:
        """True when some callback is waiting for the bundle to commit."""
        return bool(self._callbacks)

    def reset(self) -> None:
        """Forgets the registered callbacks (the bundle attempt failed)."""
        self._callbacks = []

    def __reduce__(self):
        return (_BundleFinalizerParam, ())


class _RestrictionDoFnParam(_DoFnParam):
    """`DoFn.RestrictionParam(provider)`: the runner passes the tracker view of the element's
    current restriction; `provider` (a RestrictionProvider) creates and splits restrictions, or
    None when the DoFn is its own provider."""

    __slots__ = ("restriction_provider",)

    def __init__(self, restriction_provider: Any = None) -> None:
        from headrace.errors import InvalidArgumentError
        from headrace.pipeline.splittable import RestrictionProvider
        if restriction_provider is not None and not isinstance(restriction_provider, RestrictionProvider):
            raise InvalidArgumentError(
                "DoFn.RestrictionParam needs a RestrictionProvider (or nothing, when the DoFn "
                f"subclasses RestrictionProvider itself), got {restriction_provider!r}")
        super().__init__("RestrictionParam")
        self.restriction_provider = restriction_provider

    def __repr__(self) -> str:
        return f"DoFn.RestrictionParam({self.restriction_provider!r})"

    def __reduce__(self):
        return (_RestrictionDoFnParam, (self.restriction_provider,))


class _WatermarkEstimatorDoFnParam(_DoFnParam):
    """`DoFn.WatermarkEstimatorParam(provider)`: the runner passes the watermark estimator of the
    element's current restriction; `provider` (a WatermarkEstimatorProvider) creates it, or None
    when the DoFn is its own provider."""

    __slots__ = ("watermark_estimator_provider",)

    def __init__(self, watermark_estimator_provider: Any = None) -> None:
        from headrace.errors import InvalidArgumentError
        from headrace.pipeline.splittable import WatermarkEstimatorProvider
        if watermark_estimator_provider is not None and not isinstance(
                watermark_estimator_provider, WatermarkEstimatorProvider):
            raise InvalidArgumentError(
                "DoFn.WatermarkEstimatorParam needs a WatermarkEstimatorProvider (e.g. "
                "ManualWatermarkEstimator.default_provider()), or nothing when the DoFn subclasses "
                f"WatermarkEstimatorProvider itself; got {watermark_estimator_provider!r}")
        super().__init__("WatermarkEstimatorParam")
        self.watermark_estimator_provider = watermark_estimator_provider

    def __repr__(self) -> str:
        return f"DoFn.WatermarkEstimatorParam({self.watermark_estimator_provider!r})"

    def __reduce__(self):
        return (_WatermarkEstimatorDoFnParam, (self.watermark_estimator_provider,))


def _unbounded_per_element() -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """`@DoFn.unbounded_per_element()`: marks a DoFn's `process` (a splittable DoFn's, as a rule)
    as doing work that may never end for one element: its output PCollection is unbounded."""
    def mark(process: Callable[..., Any]) -> Callable[..., Any]:
        process.unbounded_per_element = True  # type: ignore[attr-defined]
        return process
    return mark


def is_splittable_dofn(dofn: Any) -> bool:
    """True when the DoFn's `process` takes a `DoFn.RestrictionParam` (a splittable DoFn)."""
    process = getattr(dofn, "process", None)
    if process is None or type(dofn).__name__ == "_CallableWrapperDoFn":
        return False
    try:
        params = inspect.signature(process).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(isinstance(p.default, _RestrictionDoFnParam) or p.default is _RestrictionDoFnParam
               for p in params)


def positional_slots(fn: Callable[..., Any], n_args: int) -> List[str]:
    """The names of the parameters of `fn(element, ...)` that the first extra arguments of a
    ParDo (or Map) fill, in Beam's order: the parameters without a default after the element,
    then those whose default is `DoFn.SideInputParam` or a plain value (the other special
    parameters are skipped, since the runner fills them). At most `n_args` names."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return []
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    plain = [p.name for p in positional[1:] if p.default is p.empty]
    defaulted = [p.name for p in positional[1:] if p.default is not p.empty and (
        p.default is DoFn.SideInputParam or not (
            isinstance(p.default, _DoFnParam) or p.default is _BundleFinalizerParam))]
    return (plain + defaulted)[:n_args]


def side_input_params(fn: Callable[..., Any]) -> List[str]:
    """The parameters of `fn` declared with the default `DoFn.SideInputParam`."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if p.default is DoFn.SideInputParam]


class DoFn:
    """Per-element processing: `process(element, ...)` yields outputs; lifecycle methods bracket it.

    Lifecycle: `setup()` once per instance; `start_bundle()` / `finish_bundle()` around each
    bundle; `teardown()` when the instance is discarded (also after a failed bundle). Special
    parameters of `process` are given as defaults: `timestamp=DoFn.TimestampParam`,
    `window=DoFn.WindowParam`, `pane_info=DoFn.PaneInfoParam`,
    `is_retraction=DoFn.RetractionParam`, `key=DoFn.KeyParam` (the key of a (key, value)
    element), `side=DoFn.SideInputParam` (a parameter that takes one of the extra arguments
    given to ParDo, e.g. a side-input view) and `finalizer=DoFn.BundleFinalizerParam`. A
    stateful DoFn (on a keyed PCollection) also takes `DoFn.StateParam(spec)`,
    `DoFn.TimerParam(spec)` and, in a timer callback, `DoFn.DynamicTimerTagParam` (see
    `headrace.transforms.userstate`). A splittable DoFn takes `DoFn.RestrictionParam(provider)`
    and may take `DoFn.WatermarkEstimatorParam(provider)` (see `headrace.pipeline.splittable`).
    """

    ElementParam = _param("ElementParam")
    TimestampParam = _param("TimestampParam")
    WindowParam = _param("WindowParam")
    PaneInfoParam = _param("PaneInfoParam")
    KeyParam = _param("KeyParam")
    RetractionParam = _param("RetractionParam")
    DynamicTimerTagParam = _param("DynamicTimerTagParam")
    StateParam = _StateDoFnParam
    TimerParam = _TimerDoFnParam
    SideInputParam = _param("SideInputParam")
    BundleFinalizerParam = _BundleFinalizerParam
    RestrictionParam = _RestrictionDoFnParam
    WatermarkEstimatorParam = _WatermarkEstimatorDoFnParam
    unbounded_per_element = staticmethod(_unbounded_per_element)

    def setup(self) -> None:
        """Called once per DoFn instance before its first bundle."""

    def start_bundle(self) -> None:
        """Called before each bundle."""

    def process(self, element: Any, *args: Any, **kwargs: Any) -> Optional[Iterable[Any]]:
        """Processes one element; returns or yields outputs (values, TimestampedValue, TaggedOutput)."""
        raise NotImplementedError(f"{type(self).__name__} must implement process(self, element)")

    def finish_bundle(self) -> Optional[Iterable[Any]]:
        """Called after each bundle; may yield WindowedValues."""

    def teardown(self) -> None:
        """Called once when the instance is discarded (best effort, as in Beam)."""

    def default_label(self) -> str:
        """The label used when this DoFn is applied without one."""
        return type(self).__name__

    def infer_output_type(self, input_type: Any) -> Any:
        """The output element type, when known (None otherwise)."""
        return None


class _CallableWrapperDoFn(DoFn):
    """Wraps the function given to Map / FlatMap / Filter; runners recognise `kind` and call it directly."""

    def __init__(self, fn: Any, kind: str) -> None:
        self.fn = fn
        self.kind = kind  # 'map', 'flatmap', 'maptuple', 'flatmaptuple', 'filter'

    def process(self, element: Any, *args: Any, **kwargs: Any) -> Iterable[Any]:
        kind = self.kind
        if kind == "map":
            return [self.fn(element, *args, **kwargs)]
        if kind == "flatmap":
            return self.fn(element, *args, **kwargs)
        if kind == "maptuple":
            return [self.fn(*element, *args, **kwargs)]
        if kind == "flatmaptuple":
            return self.fn(*element, *args, **kwargs)
        return [element] if self.fn(element, *args, **kwargs) else []

    def default_label(self) -> str:
        from headrace.pipeline.ptransform import label_from_callable
        return label_from_callable(self.fn)
