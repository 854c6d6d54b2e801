"""DoFn: the user's per-element code, with Beam's lifecycle and special parameters."""

from __future__ import annotations

from typing import Any, Dict, Iterable, Optional


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


class DoFn:
    """Per-element processing: `process(element, ...)` yields outputs; lifecycle methods bracket it.

    Lifecycle: `setup()` once per instance; `start_bundle()` / `finish_bundle()` around each
    bundle; `teardown()` when the instance is discarded (also after a failed bundle). Special
    parameters of `process` are given as defaults: `timestamp=DoFn.TimestampParam`,
    `window=DoFn.WindowParam`, `pane_info=DoFn.PaneInfoParam`,
    `is_retraction=DoFn.RetractionParam`. A stateful DoFn (on a keyed PCollection) also takes
    `DoFn.StateParam(spec)`, `DoFn.TimerParam(spec)`, `DoFn.KeyParam` and, in a timer callback,
    `DoFn.DynamicTimerTagParam` (see `headrace.transforms.userstate`).
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
