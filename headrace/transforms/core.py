"""The core transforms: Create, ParDo, Map, FlatMap, Filter, GroupByKey, Combine*, Flatten, WindowInto, ..."""

from __future__ import annotations

import copy
import logging
import random
import typing
from typing import Any, Callable, Dict, Iterable, Optional, Tuple

from headrace.errors import (
    DeadLetterThresholdError, InvalidArgumentError, PipelineConstructionError,
    UnsupportedArgumentError,
)
from headrace.model.combine import BoundCombineFn, CombineFn, as_combine_fn, combine_values
from headrace.model.time import Duration
from headrace.model.trigger import AccumulationMode, DefaultTrigger
from headrace.model.typecoders import registry as coder_registry
from headrace.model.window import GlobalWindows, WindowFn
from headrace.model.strategy import Windowing
from headrace.model.windowed import TimestampedValue
from headrace.pipeline import userstate as _userstate
from headrace.pipeline.dofn import (
    DoFn, _CallableWrapperDoFn, is_splittable_dofn, positional_slots, side_input_params,
)
from headrace.pipeline.splittable import (  # noqa: F401  (Beam's names here)
    RestrictionProvider, WatermarkEstimatorProvider, check_splittable_step, signature,
)
from headrace.pipeline.ptransform import PTransform, label_from_callable
from headrace.pipeline.pvalue import (
    AsList, AsSideInput, DoOutputsTuple, PBegin, PCollection, TaggedOutput,
)
from headrace.typehints.decorators import IOTypeHints, declared_hints, get_type_hints
from headrace.typehints.typehints import type_name

# ---------------------------------------------------------------------------------------
# element types: just enough to reject grouping of non key-value data at construction time

_log = logging.getLogger(__name__)
KV_TYPE = typing.Tuple[typing.Any, typing.Any]
_NOT_KV = (str, bytes, int, float, bool, dict, set, frozenset, type(None))


def is_kv_type(t: Any) -> Optional[bool]:
    """True / False when `t` is known to be / not to be a key-value type; None when unknown."""
    if t is None or t is typing.Any:
        return None
    if t in _NOT_KV:
        return False
    origin = typing.get_origin(t)
    if origin is tuple:
        args = typing.get_args(t)
        if len(args) == 2 and args[1] is not Ellipsis:
            return True
        return None if not args or args[-1] is Ellipsis else False
    if t is tuple or t is list:
        return None
    if isinstance(t, type) and not issubclass(t, (tuple, list)):
        return False
    return None


def _infer_values_type(values: list) -> Any:
    if not values:
        return None
    inner = [v.value if isinstance(v, TimestampedValue) else v for v in values]
    if all(isinstance(v, tuple) and len(v) == 2 for v in inner):
        return KV_TYPE
    types = {type(v) for v in inner}
    return types.pop() if len(types) == 1 else None


def _require_pcollection(transform: PTransform, pvalue: Any) -> PCollection:
    if isinstance(pvalue, PCollection):
        return pvalue
    label = transform.pipeline.current_transform().full_label if transform.pipeline else transform.label
    if isinstance(pvalue, PBegin):
        raise PipelineConstructionError(
            f"step {label!r} ({type(transform).__name__}) needs an input PCollection but was applied "
            "to the pipeline itself; start with beam.Create([...]) or a read such as ReadFromText")
    raise PipelineConstructionError(
        f"step {label!r} ({type(transform).__name__}) needs one PCollection as input, got "
        f"{type(pvalue).__name__}")


def _check_kv(transform: PTransform, pcoll: PCollection) -> None:
    if not getattr(transform.pipeline.options, "pipeline_type_check", True):
        return
    if is_kv_type(pcoll.element_type) is False:
        label = transform.pipeline.current_transform().full_label
        name = getattr(pcoll.element_type, "__name__", repr(pcoll.element_type))
        raise PipelineConstructionError(
            f"step {label!r} ({type(transform).__name__}) groups by key, so its input must hold "
            f"(key, value) pairs, but {pcoll.label!r} produces {name} elements; apply "
            "beam.Map(lambda x: (key_of(x), x)) or beam.WithKeys(...) first")


# ---------------------------------------------------------------------------------------
# Create


class Create(PTransform):
    """A bounded PCollection of the given values (TimestampedValues set event times).

    `reshuffle` is Beam's switch for spreading the values over workers; it never changes the
    result, and headrace always spreads them (bundles of --bundle_size, Spark partitions), as
    Beam does by default.
    """

    _primitive = True

    def __init__(self, values: Iterable[Any], reshuffle: bool = True) -> None:
        super().__init__()
        if isinstance(values, (str, bytes)):
            raise InvalidArgumentError(
                f"Create({values!r}) was given a string; pass a list of values, e.g. Create([{values!r}])")
        if isinstance(values, dict):
            values = list(values.items())
        try:
            self.values = list(values)
        except TypeError:
            raise InvalidArgumentError(
                f"Create needs an iterable of values, got {type(values).__name__} {values!r}") from None

    def default_label(self) -> str:
        return "Create"

    def expand(self, pbegin: Any) -> PCollection:
        if not isinstance(pbegin, PBegin):
            raise PipelineConstructionError(
                "Create is a root transform: apply it to the pipeline (p | beam.Create([...])), "
                "not to a PCollection")
        out_type = self.get_output_type() or _infer_values_type(self.values)
        return self.pipeline.new_pcollection(Windowing(GlobalWindows()), True, element_type=out_type)


# ---------------------------------------------------------------------------------------
# ParDo and the element-wise family


class ParDo(PTransform):
    """Applies a DoFn to every element; extra args (and side-input views) go to `process`."""

    _primitive = True

    def __init__(self, fn: DoFn, *args: Any, **kwargs: Any) -> None:
        super().__init__()
        if isinstance(fn, type) and issubclass(fn, DoFn):
            raise InvalidArgumentError(
                f"ParDo got the DoFn class {fn.__name__}; pass an instance: ParDo({fn.__name__}())")
        if not isinstance(fn, DoFn):
            hint = " (use beam.Map or beam.FlatMap for a function)" if callable(fn) else ""
            raise InvalidArgumentError(
                f"ParDo needs a DoFn instance, got {type(fn).__name__} {fn!r}{hint}")
        self.fn = fn
        self.args = args
        self.kwargs = kwargs
        _check_side_input_params(fn, args, kwargs)
        self.side_inputs = tuple(a for a in list(args) + list(kwargs.values())
                                 if isinstance(a, AsSideInput))
        self.output_tags: Tuple[str, ...] = ()
        self.multi_output = False  # with_outputs was called (even with no tags)
        self.dynamic_outputs = False  # tags not declared may be read (then they are outputs)
        self.main_tag: Optional[str] = None
        self.dead_letter: Optional[Dict[str, Any]] = None
        self.is_stateful = _userstate.is_stateful_dofn(fn)
        if self.is_stateful:
            _userstate.validate_stateful_dofn(fn)
        #: A splittable DoFn (its process takes DoFn.RestrictionParam): a unit of its own.
        self.is_splittable = is_splittable_dofn(fn)

    def default_label(self) -> str:
        return f"ParDo({self.fn.default_label()})"

    def with_outputs(self, *tags: str, main: Optional[str] = None, allow_unknown_tags: Any = None
                     ) -> "ParDo":
        """Declares tagged outputs; the result of applying it is a DoOutputsTuple.

        As in Beam, with no tags (or `allow_unknown_tags=True`) any tag can be read from the
        result, each becoming an output of the step when first read (before the pipeline
        runs), and what the DoFn emits to a tag never read is dropped; otherwise emitting to a
        tag not declared is an error naming the step.
        """
        for t in tags:
            if not isinstance(t, str):
                raise InvalidArgumentError(f"with_outputs tags must be str, got {t!r}")
        out = copy.copy(self)
        out.output_tags = tuple(tags)
        out.multi_output = True
        out.dynamic_outputs = not tags if allow_unknown_tags is None else bool(allow_unknown_tags)
        if main is not None or self.dead_letter is None:  # keeps with_exception_handling's main_tag
            out.main_tag = main
        return out

    def with_exception_handling(self, main_tag: str = "good", dead_letter_tag: str = "bad", *,
                                exc_class: Any = Exception, partial: bool = False,
                                use_subprocess: bool = False, threshold: float = 1,
                                threshold_windowing: Optional[WindowFn] = None,
                                timeout: Optional[float] = None, error_handler: Any = None,
                                on_failure_callback: Optional[Callable[[Exception, Any], None]] = None,
                                allow_unsafe_userstate_in_process: bool = False) -> PTransform:
        """Routes elements whose processing raises `exc_class` to the `dead_letter_tag` output.

        Applying the result gives (good, bad). Each dead-letter element is `(element,
        (exception type, repr, traceback lines))`, with `.step` and `.exception` on the inner
        tuple. As in Beam: `partial=True` emits an element's outputs as they are produced
        (those before a failure stay) instead of only once it succeeded; `timeout` (seconds)
        sends an element whose processing takes longer to the dead letter with a
        `TimeoutError`; `use_subprocess=True` runs the DoFn in a child process, so an element
        that kills it (`os._exit`, a segfault) goes to the dead letter with a
        `BrokenProcessPool` and the next element gets a new process; `on_failure_callback(
        exception, element)` is called for each dead-lettered element (its own errors are
        logged); `threshold` fails the run when, in some window of the input (or of
        `threshold_windowing`), more than that fraction of the step's input elements went to
        the dead letter: the count is over the whole step, not per bundle, and checked once
        the window's counts are complete (see docs/semantics.md). `error_handler` (Beam's
        ErrorHandler) is refused; a DoFn with state or timers needs
        `allow_unsafe_userstate_in_process=True` (a failed element keeps its state changes).
        """
        where = f"{self.label}.with_exception_handling"
        if not (isinstance(exc_class, type) and issubclass(exc_class, BaseException)) and not (
                isinstance(exc_class, tuple) and exc_class and all(
                    isinstance(c, type) and issubclass(c, BaseException) for c in exc_class)):
            raise InvalidArgumentError(
                f"{where}(exc_class=...) must be an exception class or a tuple of them, got {exc_class!r}")
        for name, tag in (("main_tag", main_tag), ("dead_letter_tag", dead_letter_tag)):
            if not isinstance(tag, str) or not tag:
                raise InvalidArgumentError(f"{where}({name}=...) must be a non-empty str, got {tag!r}")
        if main_tag == dead_letter_tag:
            raise InvalidArgumentError(
                f"{where}: main_tag and dead_letter_tag are both {main_tag!r}; give them different names")
        if partial and use_subprocess:
            raise InvalidArgumentError(
                f"{where}: partial=True and use_subprocess=True cannot be combined (a subprocess "
                "returns an element's outputs all at once, as in Beam); drop one of them")
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) \
                or not threshold >= 0:
            raise InvalidArgumentError(
                f"{where}(threshold={threshold!r}) must be a fraction of the input between 0 and 1 "
                "(0: fail on any bad element; 1, the default: never fail)")
        if threshold_windowing is not None and not isinstance(threshold_windowing, WindowFn):
            raise InvalidArgumentError(
                f"{where}(threshold_windowing=...) must be a WindowFn such as "
                f"window.FixedWindows(60), got {threshold_windowing!r}")
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                    or not timeout > 0):
            raise InvalidArgumentError(
                f"{where}(timeout={timeout!r}) must be a positive number of seconds, or None for no limit")
        if on_failure_callback is not None and not callable(on_failure_callback):
            raise InvalidArgumentError(
                f"{where}(on_failure_callback=...) must be callable as callback(exception, element), "
                f"got {on_failure_callback!r}")
        if error_handler is not None:
            raise UnsupportedArgumentError(
                f"{where}(error_handler=...): headrace has no ErrorHandler; use the (good, bad) "
                "outputs this returns and apply your error sink to the bad one, e.g. "
                "good, bad = pcoll | step.with_exception_handling(); bad | beam.WriteToText(...)")
        if self.is_stateful and not allow_unsafe_userstate_in_process:
            raise InvalidArgumentError(
                f"{where}: the DoFn has state or timers, and an element that fails after changing "
                "state keeps its changes while the element goes to the dead letter; pass "
                "allow_unsafe_userstate_in_process=True to accept that (as in Beam)")
        if self.is_splittable:
            raise InvalidArgumentError(
                f"{where}: {type(self.fn).__name__} is a splittable DoFn, whose failed restriction "
                "would be retried as a whole; headrace does not route its failures to a dead "
                "letter: catch errors inside process and output them with beam.pvalue.TaggedOutput")
        if self.is_stateful and use_subprocess:
            raise InvalidArgumentError(
                f"{where}(use_subprocess=True): a DoFn with state or timers cannot run in a child "
                "process (its state lives in the runner); drop use_subprocess")
        out = copy.copy(self)
        out.main_tag = main_tag
        out.dead_letter = {"tag": dead_letter_tag, "exc_class": exc_class, "partial": bool(partial),
                           "use_subprocess": bool(use_subprocess), "timeout": timeout,
                           "on_failure_callback": on_failure_callback}
        if threshold < 1:
            return _ThresholdChecked(out, threshold, threshold_windowing)
        return out

    def expand(self, pcoll: Any) -> Any:
        pcoll = _require_pcollection(self, pcoll)
        p = self.pipeline
        if self.is_stateful:
            self._check_stateful_input(pcoll)
        # a DoFn whose work per element may never end makes an unbounded output, splittable
        # or not (as Beam's ParDo)
        bounded = pcoll.is_bounded and not getattr(self.fn.process, "unbounded_per_element", False)
        if self.is_splittable:
            bounded = self._check_splittable(pcoll)
        main = p.new_pcollection(pcoll.windowing, bounded,
                                 element_type=self.get_output_type() or self._infer_output_type(pcoll))
        main.may_contain_retractions = pcoll.may_contain_retractions
        if not self.multi_output and self.dead_letter is None:
            return main
        outputs: Dict[Optional[str], PCollection] = {None: main}
        tags = list(self.output_tags)
        if self.dead_letter is not None:
            tags.append(self.dead_letter["tag"])
        for t in tags:
            if t in outputs or t == self.main_tag:
                raise PipelineConstructionError(f"output tag {t!r} is declared twice")
            outputs[t] = p.new_pcollection(pcoll.windowing, bounded, tag=t)
            outputs[t].may_contain_retractions = pcoll.may_contain_retractions
        if self.main_tag is not None:
            outputs[self.main_tag] = main
        return DoOutputsTuple(self.main_tag, outputs, tuple(tags), dynamic=self.dynamic_outputs)

    def _hinted_input_type(self) -> Any:
        """The element type the DoFn declares (decorator, or `process`'s annotation)."""
        return get_type_hints(self.fn).input_type

    def _infer_output_type(self, pcoll: PCollection) -> Any:
        hinted = get_type_hints(self.fn).output_type
        return hinted if hinted is not None else self.fn.infer_output_type(pcoll.element_type)

    def _check_splittable(self, pcoll: PCollection) -> bool:
        """Refuses what no runner honours for a splittable DoFn; whether its output is bounded."""
        label = self.pipeline.current_transform().full_label
        check_splittable_step(label, self.fn, bool(self.side_inputs), self.is_stateful)
        return pcoll.is_bounded and not signature(label, self.fn).unbounded_per_element

    def _check_stateful_input(self, pcoll: PCollection) -> None:
        """A DoFn with state or timers needs keyed input in non-merging windows (as in Beam)."""
        label = self.pipeline.current_transform().full_label
        if is_kv_type(pcoll.element_type) is False:
            name = getattr(pcoll.element_type, "__name__", repr(pcoll.element_type))
            raise PipelineConstructionError(
                f"step {label!r}: DoFn {type(self.fn).__name__} has state or timers, which are kept "
                f"per key, so its input must hold (key, value) pairs, but {pcoll.label!r} produces "
                f"{name} elements; key them first, e.g. beam.Map(lambda x: (key_of(x), x)) or "
                "beam.WithKeys(...)")
        if pcoll.windowing.windowfn.is_merging():
            raise PipelineConstructionError(
                f"step {label!r}: DoFn {type(self.fn).__name__} has state or timers, which are kept "
                f"per window, and its input is in merging windows "
                f"({type(pcoll.windowing.windowfn).__name__}) whose state would have to merge; "
                "re-window into non-merging windows first (as Beam requires), or use GroupByKey")


def _check_side_input_params(fn: DoFn, args: tuple, kwargs: Dict[str, Any]) -> None:
    """Every `DoFn.SideInputParam` parameter must get one of the ParDo's extra arguments."""
    if isinstance(fn, _CallableWrapperDoFn):
        if fn.kind in ("maptuple", "flatmaptuple"):
            return
        process: Any = fn.fn
    else:
        process = fn.process
    wanted = side_input_params(process)
    if not wanted:
        return
    filled = set(positional_slots(process, len(args))) | set(kwargs)
    missing = [n for n in wanted if n not in filled]
    if missing:
        raise InvalidArgumentError(
            f"{label_from_callable(process)}: parameter(s) {', '.join(map(repr, missing))} are "
            "declared with DoFn.SideInputParam but the ParDo passes no argument for them; pass "
            f"one per parameter, e.g. beam.ParDo(fn, beam.pvalue.AsList(pcoll)) or "
            f"{missing[0]}=beam.pvalue.AsList(pcoll)")


class _ThresholdChecked(PTransform):
    """A ParDo with a dead-letter output whose run fails when too large a fraction of its input fails.

    Beam's reading: per window of the input (or of `threshold_windowing`), the number of
    dead-letter elements against the number of input elements of the whole step; the run
    fails when bad > threshold * total, once the window's counts are complete.
    """

    def __init__(self, pardo: ParDo, threshold: float, windowfn: Optional[WindowFn]) -> None:
        super().__init__()
        self.pardo, self.threshold, self.windowfn = pardo, threshold, windowfn

    def default_label(self) -> str:
        return self.pardo.label

    def with_outputs(self, *tags: str, main: Optional[str] = None, allow_unknown_tags: Any = None
                     ) -> "_ThresholdChecked":
        """Declares more tagged outputs of the ParDo (see ParDo.with_outputs)."""
        out = copy.copy(self)
        out.pardo = self.pardo.with_outputs(*tags, main=main, allow_unknown_tags=allow_unknown_tags)
        return out

    def with_output_types(self, type_hint: Any) -> "_ThresholdChecked":
        """Declares the ParDo's main output type."""
        self.pardo.with_output_types(type_hint)
        return self

    def expand(self, pcoll: Any) -> Any:
        pcoll = _require_pcollection(self, pcoll)
        label = self.pipeline.current_transform().full_label
        pardo = copy.copy(self.pardo)
        assert pardo.dead_letter is not None  # with_exception_handling set it
        pardo.dead_letter = {**pardo.dead_letter, "step": label}
        w = pcoll.windowing
        if self.windowfn is None and not pcoll.is_bounded and isinstance(w.windowfn, GlobalWindows) \
                and isinstance(w.trigger, DefaultTrigger):
            raise InvalidArgumentError(
                f"step {label!r}: with_exception_handling(threshold={self.threshold}) on an unbounded "
                "input in the global window could only count its failures when the input ends, "
                "which it never does; pass threshold_windowing=window.FixedWindows(60) (any "
                "WindowFn) to check the threshold per window")
        result = pcoll | "ParDo" >> pardo
        bad = result[pardo.dead_letter["tag"]]
        counted, counted_bad = pcoll, bad
        if self.windowfn is not None:
            counted = pcoll | "WindowTotal" >> WindowInto(self.windowfn)
            counted_bad = bad | "WindowBad" >> WindowInto(self.windowfn)
        total = (counted | "OneTotal" >> Map(_one)
                 | "CountTotal" >> CombineGlobally(sum).as_singleton_view())
        bad_count = (counted_bad | "OneBad" >> Map(_one)
                     | "CountBad" >> CombineGlobally(sum).without_defaults())
        _ = bad_count | "CheckThreshold" >> ParDo(_CheckThreshold(label, self.threshold), total)
        return result


def _one(_: Any) -> int:
    return 1


class _CheckThreshold(DoFn):
    """Fails the run when a window's dead-letter count exceeds threshold * its input count."""

    def __init__(self, step: str, threshold: float) -> None:
        self.step, self.threshold = step, threshold

    def process(self, bad: int, total: int, window: Any = DoFn.WindowParam) -> Iterable[Any]:
        if bad > total * self.threshold:
            raise DeadLetterThresholdError(
                f"step {self.step!r}: {bad} of the {total} input elements in window {window} went to "
                f"its dead-letter output ({bad / total:.2%} > threshold={self.threshold}), so the "
                "run fails, as with_exception_handling(threshold=...) asks; fix the failing "
                "elements (their errors are in the dead-letter output) or raise the threshold",
                step=self.step)
        return ()


def _check_callable(name: str, fn: Any) -> None:
    if not callable(fn):
        raise InvalidArgumentError(
            f"{name} needs a callable (a function or lambda), got {type(fn).__name__} {fn!r}")
    if isinstance(fn, DoFn):
        raise InvalidArgumentError(f"{name} got a DoFn; use beam.ParDo({type(fn).__name__}(...)) instead")


class Map(ParDo):
    """One output per element: `fn(element, *args)`."""

    _kind = "map"

    def __init__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        _check_callable(type(self).__name__, fn)
        super().__init__(_CallableWrapperDoFn(fn, self._kind), *args, **kwargs)

    fn: _CallableWrapperDoFn

    def default_label(self) -> str:
        return f"{type(self).__name__}({label_from_callable(self.fn.fn)})"

    def _fn_hints(self) -> IOTypeHints:
        return get_type_hints(self.fn.fn, yields=self._kind in ("flatmap", "flatmaptuple"))

    def _hinted_input_type(self) -> Any:
        """The element type the function declares (decorator, or its first parameter's
        annotation); none for MapTuple / FlatMapTuple, whose parameters are the parts."""
        if self._kind in ("maptuple", "flatmaptuple"):
            return declared_hints(self.fn.fn).input_type
        return self._fn_hints().input_type

    def _infer_output_type(self, pcoll: PCollection) -> Any:
        if self._kind == "filter":
            return pcoll.element_type
        return self._fn_hints().output_type


class MapTuple(Map):
    """One output per tuple element: `fn(*element, *args)`."""

    _kind = "maptuple"


class FlatMap(Map):
    """Zero or more outputs per element: iterates `fn(element, *args)`."""

    _kind = "flatmap"

    def __init__(self, fn: Optional[Callable[..., Any]] = None, *args: Any, **kwargs: Any) -> None:
        super().__init__(fn if fn is not None else _identity, *args, **kwargs)


def _identity(x: Any) -> Any:
    return x


class FlatMapTuple(Map):
    """Zero or more outputs per tuple element: iterates `fn(*element, *args)`."""

    _kind = "flatmaptuple"


class Filter(Map):
    """Keeps the elements for which `fn(element, *args)` is true."""

    _kind = "filter"


def Keys(label: str = "Keys") -> PTransform:
    """The keys of (key, value) pairs."""
    return label >> Map(_key)


def Values(label: str = "Values") -> PTransform:
    """The values of (key, value) pairs."""
    return label >> Map(_value)


def KvSwap(label: str = "KvSwap") -> PTransform:
    """(key, value) pairs turned into (value, key)."""
    return label >> Map(_swap)


def _key(kv: Any) -> Any:
    return kv[0]


def _value(kv: Any) -> Any:
    return kv[1]


def _swap(kv: Any) -> Any:
    return (kv[1], kv[0])


class WithKeys(PTransform):
    """Pairs each element with a key: `(k, element)` for a constant `k`, or
    `(k(element, *args, **kwargs), element)` when `k` is callable; the extra arguments may be
    side-input views, as for Map."""

    def __init__(self, k: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__()
        if (args or kwargs) and not callable(k):
            raise InvalidArgumentError(
                f"WithKeys({k!r}, ...) got extra arguments, which only a callable key takes; "
                "pass a function, e.g. WithKeys(lambda v, side: ..., beam.pvalue.AsSingleton(pc))")
        self.key, self.args, self.kwargs = k, args, kwargs

    def expand(self, pcoll: PCollection) -> PCollection:
        key = self.key
        if callable(key):
            return pcoll | Map(_KeyWith(key), *self.args, **self.kwargs).with_output_types(KV_TYPE)
        return pcoll | Map(_ConstantKey(key)).with_output_types(KV_TYPE)


class _KeyWith:
    """`v -> (fn(v, *args, **kwargs), v)`."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    def __call__(self, v: Any, *args: Any, **kwargs: Any) -> Any:
        return (self.fn(v, *args, **kwargs), v)

    def default_label(self) -> str:
        """`KeyWith(<the key function's label>)`."""
        return f"KeyWith({label_from_callable(self.fn)})"


class _ConstantKey:
    """`v -> (key, v)`."""

    def __init__(self, key: Any) -> None:
        self.key = key

    def __call__(self, v: Any) -> Any:
        return (self.key, v)

    def default_label(self) -> str:
        """`ConstantKey`."""
        return "ConstantKey"


# ---------------------------------------------------------------------------------------
# windowing


class WindowInto(PTransform):
    """Assigns elements to windows of `windowfn` and sets trigger, accumulation, lateness and timestamps."""

    _primitive = True

    def __init__(self, windowfn: WindowFn, trigger: Any = None, accumulation_mode: Any = None,
                 timestamp_combiner: Any = None, allowed_lateness: Any = 0,
                 closing_behavior: Any = None, on_time_behavior: Any = None) -> None:
        super().__init__()
        if isinstance(windowfn, type) and issubclass(windowfn, WindowFn):
            raise InvalidArgumentError(
                f"WindowInto got the class {windowfn.__name__}; pass an instance such as "
                f"{windowfn.__name__}(...)")
        self.windowing = Windowing(windowfn, trigger, accumulation_mode, timestamp_combiner,
                                   allowed_lateness, closing_behavior, on_time_behavior)
        self.windowfn = windowfn

    def default_label(self) -> str:
        return f"WindowInto({self.windowfn!r})"

    def expand(self, pcoll: Any) -> PCollection:
        pcoll = _require_pcollection(self, pcoll)
        out = self.pipeline.new_pcollection(self.windowing, pcoll.is_bounded,
                                            element_type=pcoll.element_type)
        out.may_contain_retractions = pcoll.may_contain_retractions
        return out


# ---------------------------------------------------------------------------------------
# grouping and combining


def _check_groupable(transform: PTransform, pcoll: PCollection) -> None:
    """Rejects grouping an unbounded PCollection in the global window with the default trigger.

    As in Beam, --allow_unsafe_triggers turns the error into a warning: the grouping then
    emits only when the watermark reaches the end of time.
    """
    w = pcoll.windowing
    if pcoll.is_bounded or not isinstance(w.windowfn, GlobalWindows) \
            or not isinstance(w.trigger, DefaultTrigger):
        return
    label = transform.pipeline.current_transform().full_label
    if transform.pipeline.allow_unsafe_triggers:
        _log.warning(
            "step %r (%s) groups the unbounded PCollection %r in the global window with the "
            "default trigger: allowed because --allow_unsafe_triggers is set, but it emits "
            "nothing until the watermark reaches the end of time", label,
            type(transform).__name__, pcoll.label)
        return
    raise PipelineConstructionError(
        f"step {label!r} ({type(transform).__name__}) groups the unbounded PCollection "
        f"{pcoll.label!r} in the global window with the default trigger, so it would never emit "
        "anything: the default trigger fires when the watermark passes the end of the window, "
        "and the global window ends only when the input does. Window the input first, e.g. "
        "beam.WindowInto(window.FixedWindows(60)), or set a trigger, e.g. "
        "beam.WindowInto(window.GlobalWindows(), trigger=trigger.Repeatedly("
        "trigger.AfterProcessingTime(60)), accumulation_mode=trigger.AccumulationMode.DISCARDING). "
        "To run it anyway (it emits when the watermark reaches the end of time), pass the "
        "pipeline option --allow_unsafe_triggers")


def _kv_args(element_type: Any) -> Optional[Tuple[Any, Any]]:
    """(key type, value type) of a `Tuple[K, V]` element type, else None."""
    if typing.get_origin(element_type) is tuple:
        args = typing.get_args(element_type)
        if len(args) == 2 and args[1] is not Ellipsis:
            return args[0], args[1]
    return None


def _check_key_coder(transform: PTransform, pcoll: PCollection) -> None:
    """Refuses a grouping whose key type has a coder that cannot be made deterministic (Beam's
    `verify_deterministic`): equal keys might not group together."""
    kv = _kv_args(pcoll.element_type)
    if kv is None or kv[0] in (None, typing.Any):
        return
    label = transform.pipeline.current_transform().full_label
    try:
        coder_registry.verify_deterministic(coder_registry.get_coder(kv[0]),
                                            f"{type(transform).__name__} operation {label!r}")
    except (ValueError, TypeError) as exc:
        raise PipelineConstructionError(
            f"step {label!r} ({type(transform).__name__}) groups by keys of type "
            f"{type_name(kv[0])}: {exc}") from exc


def _grouping_outputs(transform: Any, pcoll: PCollection) -> Any:
    """The main output of a grouping and, with `with_late_data_output`, its late-data output."""
    p = transform.pipeline
    kv = _kv_args(pcoll.element_type)
    out_type: Any = KV_TYPE
    if kv is not None and isinstance(transform, GroupByKey):
        out_type = typing.Tuple[kv[0], typing.Iterable[kv[1]]]  # type: ignore[valid-type]
    elif kv is not None:
        out_type = typing.Tuple[kv[0], typing.Any]
    main = p.new_pcollection(pcoll.windowing, pcoll.is_bounded, element_type=out_type)
    main.may_contain_retractions = (pcoll.windowing.accumulation_mode
                                    is AccumulationMode.ACCUMULATING_AND_RETRACTING)
    tag = transform.late_tag
    if tag is None:
        return main
    late = p.new_pcollection(pcoll.windowing, pcoll.is_bounded, tag=tag,
                             element_type=pcoll.element_type)
    late.may_contain_retractions = pcoll.may_contain_retractions
    return DoOutputsTuple(None, {None: main, tag: late}, (tag,))


class _Grouping(PTransform):
    """What GroupByKey and CombinePerKey share: input checks, outputs and the late-data output."""

    _primitive = True
    #: The tag of the late-data output, or None when late data is only counted.
    late_tag: Optional[str] = None

    def with_late_data_output(self, tag: str = "late") -> Any:
        """Also outputs the elements dropped as late, under `tag`.

        Applying the result gives a DoOutputsTuple: the grouped panes as `result[None]` (and
        first when unpacked), and as `result.<tag>` / `result[tag]` the original `(key, value)`
        elements that arrived after their window expired (end of window + allowed lateness
        behind the input watermark), with their original timestamps and windows (an element
        of several windows appears once per window it was late for). They are behind the
        watermark downstream too, so re-window them (e.g. into GlobalWindows with a trigger)
        or process them element-wise rather than grouping them in the same windows.
        """
        if not isinstance(tag, str) or not tag:
            raise InvalidArgumentError(
                f"with_late_data_output(tag=...) needs a non-empty str tag, got {tag!r}; "
                "e.g. with_late_data_output(tag='late')")
        out = copy.copy(self)
        out.late_tag = tag
        return out

    def expand(self, pcoll: Any) -> Any:
        pcoll = _require_pcollection(self, pcoll)
        _check_kv(self, pcoll)
        _check_key_coder(self, pcoll)
        _check_groupable(self, pcoll)
        return _grouping_outputs(self, pcoll)


class GroupByKey(_Grouping):
    """GroupByKeyAndWindow: (key, value) pairs to (key, [values]) per window and pane.

    Grouping an unbounded PCollection in the global window with the default trigger is an
    error (it would never emit): window it or set a trigger first. Elements that arrive after
    their window expired (end of window + allowed lateness behind the watermark) are dropped
    and counted in the `headrace/dropped_late_elements` counter; `with_late_data_output`
    routes them to a second output instead.
    """


class CombinePerKey(_Grouping):
    """Combines the values of each key and window with a CombineFn or a callable such as `sum`.

    Extra arguments go to every CombineFn method (`create_accumulator(*args, **kwargs)`,
    `add_input(acc, value, *args, **kwargs)`, ...) or to the callable (`fn(values, *args)`);
    side-input views among them (e.g. `AsSingleton(view)`) are replaced by their value in the
    window of the pane being computed, as for a ParDo. The same rules as GroupByKey apply to
    unbounded input and to late data (see `with_late_data_output`).
    """

    def __init__(self, fn: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__()
        has_args = bool(args or kwargs)
        if has_args and not isinstance(fn, CombineFn):
            _check_callable("CombinePerKey", fn)
        base = as_combine_fn(fn, has_args)
        #: The side-input views among the extra arguments (resolved per window by the runner).
        self.side_inputs = _side_inputs_of(args, kwargs)
        if self.side_inputs:
            self.combine_fn = base
            self.args, self.kwargs = tuple(args), dict(kwargs)
        else:  # constant arguments only: bind them once
            self.combine_fn = BoundCombineFn(base, args, kwargs) if has_args else base
            self.args, self.kwargs = (), {}
        self._fn_label = label_from_callable(fn) if not isinstance(fn, CombineFn) else fn.default_label()

    def default_label(self) -> str:
        return f"CombinePerKey({self._fn_label})"

    def with_hot_key_fanout(self, fanout: Any) -> PTransform:
        """The same combine in two levels, to spread hot keys over several workers.

        `fanout` is an int, or a function of the key giving an int: a key whose fanout is more
        than 1 has its values combined first under (shard, key) sub-keys, where each bundle
        picks one of `fanout` shards at random, and the partial accumulators are then merged
        per key with `merge_accumulators` and extracted; a fanout of 1 or less takes the plain
        path. The result is the plain combine's (the CombineFn must be associative and
        commutative, as every CombineFn must). `None` returns this transform unchanged.

        As in Beam, the first level combines in DISCARDING mode and the second in the input's
        mode, and windows are kept as they are between the levels (also sliding and merging
        ones). Only watermark-driven triggers (the default trigger, AfterWatermark without
        early firings) give the same panes as the plain combine, so other triggers, retracting
        accumulation and side-input arguments are refused when the transform is applied.
        """
        if fanout is None:
            return self
        if not (callable(fanout) or (isinstance(fanout, int) and not isinstance(fanout, bool))):
            raise InvalidArgumentError(
                f"{self.label}.with_hot_key_fanout(fanout={fanout!r}) needs an int or a function "
                "of the key returning an int, e.g. with_hot_key_fanout(10)")
        return _CombinePerKeyWithHotKeyFanout(self, fanout)


class _ConstantFanout:
    """`key -> n` (picklable, unlike a lambda in some contexts)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __call__(self, key: Any) -> int:
        return self.n

    def default_label(self) -> str:
        """The number itself."""
        return str(self.n)


class _SplitHotCold(DoFn):
    """Routes each (key, value): a hot key's to the 'hot' output under (shard, key), where the
    bundle's random nonce picks the shard; the others on, marked as plain values."""

    def __init__(self, fanout_fn: Callable[[Any], int], step: str) -> None:
        self.fanout_fn, self.step = fanout_fn, step
        self._nonce = 0

    def start_bundle(self) -> None:
        self._nonce = random.getrandbits(31)

    def process(self, element: Any) -> Iterable[Any]:
        key, value = element
        fanout = self.fanout_fn(key)
        if isinstance(fanout, bool) or not isinstance(fanout, int):
            raise InvalidArgumentError(
                f"{self.step}: the fanout function returned {fanout!r} for key {key!r}; it must "
                "return an int (1 or less: no fanout for that key)")
        if fanout <= 1:
            return [(key, (False, value))]
        return [TaggedOutput("hot", ((self._nonce % fanout, key), value))]


class _FanoutLevelFn(CombineFn):
    """One level of a fanned-out combine: the user's CombineFn's lifecycle, accumulators and
    merging, passed through."""

    def __init__(self, fn: CombineFn) -> None:
        self.fn = fn

    def setup(self, *args: Any, **kwargs: Any) -> None:
        self.fn.setup()

    def teardown(self, *args: Any, **kwargs: Any) -> None:
        self.fn.teardown()

    def create_accumulator(self) -> Any:
        return self.fn.create_accumulator()

    def merge_accumulators(self, accumulators: Iterable[Any]) -> Any:
        return self.fn.merge_accumulators(accumulators)

    def compact(self, acc: Any) -> Any:
        return self.fn.compact(acc)


class _PreCombineFn(_FanoutLevelFn):
    """The first level of a fanned-out combine: the CombineFn's accumulator, marked as one."""

    def add_input(self, acc: Any, element: Any) -> Any:
        return self.fn.add_input(acc, element)

    def add_inputs(self, acc: Any, elements: Iterable[Any]) -> Any:
        return self.fn.add_inputs(acc, elements)

    def extract_output(self, acc: Any) -> Any:
        return (True, self.fn.compact(acc))

    def default_label(self) -> str:
        return f"PreCombine({self.fn.default_label()})"


class _PostCombineFn(_FanoutLevelFn):
    """The second level: plain values (False, v) are added, accumulators (True, a) merged in."""

    def add_input(self, acc: Any, element: Any) -> Any:
        is_accumulator, value = element
        if is_accumulator:
            return self.fn.merge_accumulators([acc, value])
        return self.fn.add_input(acc, value)

    def extract_output(self, acc: Any) -> Any:
        return self.fn.extract_output(acc)

    def default_label(self) -> str:
        return f"PostCombine({self.fn.default_label()})"


def _strip_nonce(kv: Any) -> Any:
    (_, key), value = kv
    return (key, value)


def _discarding(w: Windowing) -> Windowing:
    """`w` with DISCARDING accumulation (the rest unchanged)."""
    return Windowing(w.windowfn, w.trigger if w._explicit_trigger else None,
                     AccumulationMode.DISCARDING, w.timestamp_combiner,
                     Duration(micros=w.allowed_lateness_us), w.closing_behavior, w.on_time_behavior)


class _CombinePerKeyWithHotKeyFanout(PTransform):
    """CombinePerKey(fn).with_hot_key_fanout(fanout): a two-level combine (see there)."""

    def __init__(self, combine: CombinePerKey, fanout: Any) -> None:
        super().__init__()
        self.combine = combine
        self.fanout_fn = fanout if callable(fanout) else _ConstantFanout(fanout)

    def default_label(self) -> str:
        return (f"CombinePerKeyWithHotKeyFanout({self.combine._fn_label}, "
                f"fanout={label_from_callable(self.fanout_fn)})")

    def expand(self, pcoll: Any) -> Any:
        pcoll = _require_pcollection(self, pcoll)
        label = self.pipeline.current_transform().full_label
        w = pcoll.windowing
        if self.combine.side_inputs:
            raise PipelineConstructionError(
                f"step {label!r}: with_hot_key_fanout cannot pass side inputs to the CombineFn "
                "(its two levels run in different windows of time); apply the plain CombinePerKey, "
                "or bind constant arguments instead")
        if not w.trigger.watermark_only:
            raise PipelineConstructionError(
                f"step {label!r}: with_hot_key_fanout needs a trigger that fires on the watermark "
                f"only (the default trigger, AfterWatermark without early firings), but the input "
                f"has {w.trigger!r}: with early or count- or time-based firings the second level "
                "would fire on partial accumulators and the panes would differ from the plain "
                "combine's; drop the fanout or the trigger")
        if w.accumulation_mode is AccumulationMode.ACCUMULATING_AND_RETRACTING \
                or pcoll.may_contain_retractions:
            raise PipelineConstructionError(
                f"step {label!r}: with_hot_key_fanout does not support retractions (the input is "
                "retracting or carries retractions); use the plain CombinePerKey")
        _check_kv(self, pcoll)
        fn = self.combine.combine_fn
        split = pcoll | "SplitHotCold" >> ParDo(_SplitHotCold(self.fanout_fn, label)).with_outputs(
            "hot", main="cold")
        cold, hot = split["cold"], split["hot"]
        hot.element_type = KV_TYPE
        # the first level combines in DISCARDING mode (an accumulating first level would count
        # its earlier panes again in the second); windows are kept as they are, not re-assigned
        hot.windowing = _discarding(w)
        precombined = (hot
                       | "PreCombineHot" >> CombinePerKey(_PreCombineFn(fn))
                       | "StripNonce" >> Map(_strip_nonce).with_output_types(KV_TYPE))
        precombined.windowing = w
        cold.element_type = KV_TYPE
        return ((cold, precombined)
                | "FlattenHotCold" >> Flatten()
                | "PostCombine" >> CombinePerKey(_PostCombineFn(fn)))


def _side_inputs_of(args: tuple, kwargs: Dict[str, Any]) -> Tuple[AsSideInput, ...]:
    return tuple(a for a in list(args) + list(kwargs.values()) if isinstance(a, AsSideInput))


class _CombineValuesDoFn(DoFn):
    """Combines the iterable value of each (key, values) element; extra arguments go to the CombineFn."""

    def __init__(self, fn: CombineFn) -> None:
        self.fn = fn

    def setup(self) -> None:
        self.fn.setup()

    def process(self, element: Any, *args: Any, **kwargs: Any):
        key, values = element
        fn = BoundCombineFn(self.fn, args, kwargs) if args or kwargs else self.fn
        return [(key, combine_values(fn, values))]

    def teardown(self) -> None:
        self.fn.teardown()


class CombineValues(PTransform):
    """Combines the iterable value of each (key, values) pair (extra arguments and side inputs go to fn)."""

    def __init__(self, fn: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__()
        self.combine_fn = as_combine_fn(fn, bool(args or kwargs))
        self.args, self.kwargs = args, kwargs

    def expand(self, pcoll: Any) -> PCollection:
        return pcoll | ParDo(_CombineValuesDoFn(self.combine_fn), *self.args, **self.kwargs)


class CombineGlobally(PTransform):
    """Combines all elements of each window into one value (the default value when empty).

    Extra arguments and side inputs go to the CombineFn as for CombinePerKey; the default value
    of empty input is computed with the side inputs' values too.
    """

    def __init__(self, fn: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__()
        self._fn, self._args, self._kwargs = fn, args, kwargs
        self.combine_fn = as_combine_fn(fn) if not (args or kwargs) else None
        self.has_defaults = True
        self._as_view = False
        self.fanout: Optional[Any] = None

    def default_label(self) -> str:
        fn = self._fn
        name = fn.default_label() if isinstance(fn, CombineFn) else label_from_callable(fn)
        if self.fanout is not None:
            return f"CombineGlobally({name}, fanout={self.fanout})"
        return f"CombineGlobally({name})"

    def with_fanout(self, fanout: Optional[int]) -> "CombineGlobally":
        """Combines in two levels: first in `fanout` parts in parallel, then their accumulators
        (see CombinePerKey.with_hot_key_fanout); the result is the same."""
        if fanout is not None and (isinstance(fanout, bool) or not isinstance(fanout, int)):
            raise InvalidArgumentError(
                f"{self.label}.with_fanout(fanout={fanout!r}) needs an int, e.g. with_fanout(8)")
        out = copy.copy(self)
        out.fanout = fanout
        return out

    def without_defaults(self) -> "CombineGlobally":
        """Produces nothing (instead of the default value) for empty input or windows."""
        out = copy.copy(self)
        out.has_defaults = False
        return out

    def with_defaults(self, has_defaults: bool = True) -> "CombineGlobally":
        """Chooses whether empty input produces the CombineFn's default value."""
        out = copy.copy(self)
        out.has_defaults = has_defaults
        return out

    def as_singleton_view(self) -> "CombineGlobally":
        """Returns an AsSingleton side-input view of the result (default value when empty)."""
        out = copy.copy(self)
        out._as_view = True
        return out

    def _per_key(self) -> PTransform:
        combine = CombinePerKey(self._fn, *self._args, **self._kwargs)
        return combine.with_hot_key_fanout(self.fanout) if self.fanout else combine

    def _bound_fn(self) -> CombineFn:
        """The CombineFn with the constant extra arguments bound (no side inputs among them)."""
        args, kwargs = self._args, self._kwargs
        fn = as_combine_fn(self._fn, bool(args or kwargs))
        return BoundCombineFn(fn, args, kwargs) if args or kwargs else fn

    def expand(self, pcoll: Any) -> Any:
        pcoll = _require_pcollection(self, pcoll)
        side_inputs = _side_inputs_of(self._args, self._kwargs)
        combined = (pcoll
                    | "KeyWithVoid" >> Map(_with_void_key).with_output_types(KV_TYPE)
                    | "CombinePerKey" >> self._per_key()
                    | "UnKey" >> Map(_value))
        if self._as_view:
            from headrace.pipeline.pvalue import AsSingleton
            if not self.has_defaults:
                return AsSingleton(combined)
            if side_inputs:
                raise PipelineConstructionError(
                    f"CombineGlobally {pcoll.pipeline.current_transform().full_label!r}: "
                    ".as_singleton_view() needs the default value for empty windows when the "
                    "pipeline is built, but it depends on the side inputs "
                    f"{', '.join(map(repr, side_inputs))}, which are known only when it runs; "
                    "use .without_defaults().as_singleton_view() (an empty window then reads "
                    "pvalue.EmptySideInput) or pass the default as a constant argument")
            fn = self._bound_fn()
            fn.setup()
            try:
                default = fn.apply([])
            finally:
                fn.teardown()
            return AsSingleton(combined, default_value=default)
        if not self.has_defaults:
            return combined
        if not isinstance(pcoll.windowing.windowfn, GlobalWindows):
            raise PipelineConstructionError(
                f"CombineGlobally {self.pipeline.current_transform().full_label!r}: default values "
                "are only defined in the global window, but the input is windowed by "
                f"{pcoll.windowing.windowfn!r}; use CombineGlobally(...).without_defaults() to output "
                "nothing for empty windows, or .as_singleton_view() to read the default as a side input")
        fn = as_combine_fn(self._fn, bool(self._args or self._kwargs))
        return (self.pipeline
                | "DoOnce" >> Create([None])
                | "InjectDefault" >> ParDo(_InjectDefaultDoFn(fn), AsList(combined),
                                           *self._args, **self._kwargs))


def _with_void_key(v: Any) -> Any:
    return (None, v)


class _InjectDefaultDoFn(DoFn):
    """Outputs the global combine's result, or the CombineFn's default value when there is none."""

    def __init__(self, fn: CombineFn) -> None:
        self.fn = fn

    def setup(self) -> None:
        self.fn.setup()

    def process(self, element: Any, results: list, *args: Any, **kwargs: Any):
        if results:
            return results
        fn = BoundCombineFn(self.fn, args, kwargs) if args or kwargs else self.fn
        return [fn.apply([])]

    def teardown(self) -> None:
        self.fn.teardown()


# ---------------------------------------------------------------------------------------
# Flatten, Partition, Reshuffle, CoGroupByKey


class Flatten(PTransform):
    """Merges several PCollections with compatible windowing into one."""

    _primitive = True

    def __init__(self, pipeline: Any = None, **kwargs: Any) -> None:
        super().__init__()
        if kwargs:  # Beam's Flatten(**kwargs) takes only pipeline= too
            raise InvalidArgumentError(
                f"Flatten got unexpected keyword argument(s) {', '.join(sorted(kwargs))}; it takes "
                "only pipeline= (for a Flatten of no PCollections)")
        self._pipeline_arg = pipeline

    def expand(self, pcolls: Any) -> PCollection:
        if isinstance(pcolls, PCollection):
            pcolls = (pcolls,)
        if isinstance(pcolls, dict):
            pcolls = tuple(pcolls.values())
        if isinstance(pcolls, PBegin):
            pcolls = ()
        pcolls = tuple(pcolls)
        if not pcolls:
            return self.pipeline.new_pcollection(Windowing(GlobalWindows()), True)
        first = pcolls[0].windowing
        for pc in pcolls[1:]:
            if pc.windowing.windowfn != first.windowfn:
                raise PipelineConstructionError(
                    f"Flatten {self.pipeline.current_transform().full_label!r}: inputs have "
                    f"incompatible windowing ({first.windowfn!r} vs {pc.windowing.windowfn!r}); "
                    "apply the same WindowInto to every input first")
        types = {pc.element_type for pc in pcolls}
        out = self.pipeline.new_pcollection(first, all(pc.is_bounded for pc in pcolls),
                                            element_type=types.pop() if len(types) == 1 else None)
        out.may_contain_retractions = any(pc.may_contain_retractions for pc in pcolls)
        return out


class FlattenWith(PTransform):
    """Beam's `pcoll | FlattenWith(*others)`: the input flattened with `others`, each a PCollection
    or a root transform (such as `Create` or a read) applied to the pipeline."""

    def __init__(self, *others: Any) -> None:
        super().__init__()
        for o in others:
            if not isinstance(o, (PCollection, PTransform)):
                raise InvalidArgumentError(
                    f"FlattenWith takes PCollections and root transforms, got {type(o).__name__} "
                    f"{o!r}")
        self._others = others

    def expand(self, pcoll: Any) -> PCollection:
        pcoll = _require_pcollection(self, pcoll)
        inputs = [pcoll]
        for i, o in enumerate(self._others):
            inputs.append(o if isinstance(o, PCollection) else pcoll.pipeline | f"Root{i}" >> o)
        return tuple(inputs) | Flatten()


class Impulse(PTransform):
    """Beam's root `Impulse`: one element, the empty bytes `b''`, in the global window at the
    minimum timestamp (what `Create` and reads start from in Beam)."""

    def expand(self, pbegin: Any) -> PCollection:
        if not isinstance(pbegin, PBegin):
            raise PipelineConstructionError(
                "Impulse is a root transform: apply it to the pipeline (p | beam.Impulse())")
        return pbegin | Create([b""])


class Reshuffle(PTransform):
    """Redistributes elements (a materialisation barrier), keeping timestamps and windows.

    `num_buckets` bounds, as in Beam, how many distinct keys (buckets) the elements are spread
    over (the Spark runner's round-robin keys); the local runner only re-bundles.
    """

    _primitive = True

    def __init__(self, num_buckets: Optional[int] = None) -> None:
        super().__init__()
        if num_buckets is not None and (isinstance(num_buckets, bool) or not isinstance(num_buckets, int)
                                        or num_buckets < 1):
            raise InvalidArgumentError(
                f"Reshuffle(num_buckets=...) must be a positive int or None, got {num_buckets!r}")
        self.num_buckets = num_buckets

    def expand(self, pcoll: Any) -> PCollection:
        pcoll = _require_pcollection(self, pcoll)
        out = self.pipeline.new_pcollection(pcoll.windowing, pcoll.is_bounded,
                                            element_type=pcoll.element_type)
        out.may_contain_retractions = pcoll.may_contain_retractions
        return out


class PartitionFn:
    """Beam's base class of a partition function for `Partition`: subclasses define
    `partition_for(element, num_partitions, *args, **kwargs) -> int` in [0, num_partitions)."""

    def partition_for(self, element: Any, num_partitions: int, *args: Any, **kwargs: Any) -> int:
        """The index of the partition `element` goes to."""
        raise NotImplementedError(
            f"{type(self).__name__} must define partition_for(element, num_partitions, ...)")

    def default_label(self) -> str:
        """The label of a Partition with this function: the class name."""
        return type(self).__name__


class Partition(PTransform):
    """Splits a PCollection into `n` by `fn(element, n, *args) -> index`."""

    def __init__(self, fn: Any, n: int, *args: Any, **kwargs: Any) -> None:
        super().__init__()
        if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
            raise InvalidArgumentError(f"Partition needs a positive number of partitions, got {n!r}")
        if hasattr(fn, "partition_for"):
            fn = fn.partition_for
        _check_callable("Partition", fn)
        self._fn, self._n, self._args, self._kwargs = fn, n, args, kwargs

    def default_label(self) -> str:
        return f"Partition({label_from_callable(self._fn)})"

    def expand(self, pcoll: Any) -> Tuple[PCollection, ...]:
        fn, n, args, kwargs = self._fn, self._n, self._args, self._kwargs
        tags = [str(i) for i in range(n)]
        outs = pcoll | ParDo(_PartitionDoFn(fn, n), *args, **kwargs).with_outputs(*tags)
        return tuple(outs[t] for t in tags)


class _PartitionDoFn(DoFn):
    def __init__(self, fn: Any, n: int) -> None:
        self.fn, self.n = fn, n

    def process(self, element: Any, *args: Any, **kwargs: Any):
        from headrace.pipeline.pvalue import TaggedOutput
        i = self.fn(element, self.n, *args, **kwargs)
        if not isinstance(i, int) or not 0 <= i < self.n:
            raise ValueError(
                f"the partition function returned {i!r} for {element!r}; it must return an int in "
                f"[0, {self.n})")
        yield TaggedOutput(str(i), element)


class CoGroupByKey(PTransform):
    """Joins keyed PCollections: (key, {tag: [values]}) for a dict input, tuples of lists otherwise."""

    def expand(self, pcolls: Any) -> PCollection:
        if isinstance(pcolls, dict):
            tags = list(pcolls.keys())
            inputs = [pcolls[t] for t in tags]
            as_dict = True
        elif isinstance(pcolls, (list, tuple)):
            inputs = list(pcolls)
            tags = list(range(len(inputs)))
            as_dict = False
        else:
            raise PipelineConstructionError(
                "CoGroupByKey needs a dict {tag: PCollection} or a tuple of PCollections")
        if not inputs:
            raise PipelineConstructionError("CoGroupByKey needs at least one input PCollection")
        tagged = []
        for i, (tag, pc) in enumerate(zip(tags, inputs)):
            tagged.append(pc | f"Tag[{tag}]" >> Map(_tag_value, i).with_output_types(KV_TYPE))
        grouped = tuple(tagged) | "Flatten" >> Flatten() | "Group" >> GroupByKey()
        n = len(inputs)
        return grouped | "Regroup" >> Map(_regroup, n, tags if as_dict else None)


def _tag_value(kv: Any, i: int) -> Any:
    k, v = kv
    return (k, (i, v))


def _regroup(kv: Any, n: int, tags: Optional[list]) -> Any:
    key, tagged = kv
    lists: list = [[] for _ in range(n)]
    for i, v in tagged:
        lists[i].append(v)
    if tags is not None:
        return key, dict(zip(tags, lists))
    return key, tuple(lists)

