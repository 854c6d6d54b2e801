"""Beam's `transforms.util`: Distinct, BatchElements, Regex, ToString, LogElements, Reify, Tee,
and the key-value helpers (WithKeys, Keys, Values, KvSwap) and Reshuffle of `transforms.core`."""

from __future__ import annotations

import logging
import re
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from headrace.errors import InvalidArgumentError, UnsupportedArgumentError
from headrace.metrics import Metrics
from headrace.model.time import Timestamp
from headrace.model.window import GlobalWindow
from headrace.model.windowed import TimestampedValue, WindowedValue
from headrace.pipeline.dofn import DoFn
from headrace.pipeline.ptransform import PTransform, ptransform_fn
from headrace.transforms.core import (
    KV_TYPE, CombinePerKey, CoGroupByKey, FlatMap, Keys, KvSwap, Map, ParDo, Reshuffle, Values,
    WithKeys,
)
from headrace.transforms.group_into_batches import GroupIntoBatches

__all__ = ["BatchElements", "CoGroupByKey", "Distinct", "GroupIntoBatches", "Keys", "KvSwap",
           "LogElements", "Regex", "Reify", "RemoveDuplicates", "Reshuffle", "Tee", "ToString",
           "Values", "WithKeys"]

_LOGGER = logging.getLogger(__name__)


def _none_of(values: Any) -> None:
    return None


def _pair_with_none(x: Any) -> Any:
    return (x, None)


class Distinct(PTransform):
    """The distinct elements of a PCollection (per window)."""

    def expand(self, pcoll: Any) -> Any:
        element = getattr(pcoll, "element_type", None)
        pairs = KV_TYPE if element is None else Tuple[element, Any]
        return (pcoll
                | "ToPairs" >> Map(_pair_with_none).with_output_types(pairs)
                | "Group" >> CombinePerKey(_none_of)
                | "Distinct" >> Keys())


RemoveDuplicates = Distinct


# ---------------------------------------------------------------------------------------
# BatchElements


class _BatchSizer:
    """Chooses the next batch size from the measured cost of earlier batches.

    The cost of a batch of size x is modelled as `a + b*x` seconds (least squares over the
    recent measurements); the next size is the largest that keeps within every target given
    (`b*x <= target_batch_duration_secs`, `a + b*x <= ..._including_fixed_cost`,
    `a / (a + b*x) >= target_batch_overhead`), at most twice the last size, and always within
    [min_batch_size, max_batch_size]. Before two measurements exist it tries the minimum and
    then twice the minimum.
    """

    _MAX_POINTS = 100
    _GROWTH = 2

    def __init__(self, min_size: int, max_size: int, overhead: Optional[float],
                 duration: Optional[float], duration_with_fixed: Optional[float]) -> None:
        self.min_size, self.max_size = min_size, max_size
        self.overhead, self.duration, self.duration_with_fixed = overhead, duration, duration_with_fixed
        self.data: List[Tuple[int, float]] = []

    def record(self, size: int, seconds: float) -> None:
        """Adds the cost of one batch."""
        self.data.append((size, seconds))
        if len(self.data) > self._MAX_POINTS:
            del self.data[: len(self.data) - self._MAX_POINTS]

    def next_size(self) -> int:
        """The size to aim for with the next batch."""
        lo, hi = self.min_size, self.max_size
        if lo == hi or not self.data:
            return lo
        if len(self.data) < 2:
            return max(min(hi, lo * self._GROWTH), min(hi, lo + 1))
        a, b = _fit_line([x for x, _ in self.data], [y for _, y in self.data])
        a, b = max(a, 1e-10), max(b, 1e-20)
        target = float(hi)
        if self.duration_with_fixed:
            target = min(target, (self.duration_with_fixed - a) / b)
        if self.duration:
            target = min(target, self.duration / b)
        if self.overhead:
            target = min(target, (a / b) * (1 / self.overhead - 1))
        cap = min(self.data[-1][0] * self._GROWTH, hi)
        jitter = len(self.data) % 2  # alternate sizes so that the line stays well defined
        return int(max(min(lo + jitter, hi), min(target, cap)))


def _fit_line(xs: Sequence[float], ys: Sequence[float]) -> Tuple[float, float]:
    """(a, b) of the least-squares line y = a + b*x."""
    n = len(xs)
    xbar, ybar = sum(xs) / n, sum(ys) / n
    if xbar == 0:
        return ybar, 0.0
    sxx = sum((x - xbar) ** 2 for x in xs)
    if sxx == 0:
        return 0.0, ybar / xbar
    b = sum((x - xbar) * (y - ybar) for x, y in zip(xs, ys)) / sxx
    return ybar - b * xbar, b


def _one(_: Any) -> int:
    return 1


class _Batch:
    __slots__ = ("elements", "size")

    def __init__(self) -> None:
        self.elements: List[Any] = []
        self.size = 0


class _BatchElementsDoFn(DoFn):
    """Collects each window's elements of a bundle into lists (BatchElements' work)."""

    _MAX_LIVE_WINDOWS = 10

    def __init__(self, sizer: _BatchSizer, element_size_fn: Callable[[Any], int],
                 clock: Callable[[], float], record_metrics: bool) -> None:
        self.sizer = sizer
        self.element_size_fn = element_size_fn
        self.clock = clock
        self.record_metrics = record_metrics
        self._batches: Dict[Any, _Batch] = {}
        self._target = 1

    def setup(self) -> None:
        self._size_metric = Metrics.distribution("BatchElements", "batch_size")
        self._time_metric = Metrics.distribution("BatchElements", "msec_per_batch")

    def start_bundle(self) -> None:
        self._batches = {}
        self._target = self.sizer.next_size()

    def process(self, element: Any, window: Any = DoFn.WindowParam) -> Iterator[WindowedValue]:
        size = self.element_size_fn(element)
        batch = self._batches.get(window)
        if batch is not None and batch.elements and batch.size + size > self._target:
            yield from self._emit(window)
            batch = None
        if batch is None:
            batch = self._batches[window] = _Batch()
        batch.elements.append(element)
        batch.size += size
        if batch.size >= self._target:
            yield from self._emit(window)
        elif len(self._batches) > self._MAX_LIVE_WINDOWS:
            yield from self._emit(max(self._batches, key=lambda w: self._batches[w].size))

    def finish_bundle(self) -> Iterator[WindowedValue]:
        for window in list(self._batches):
            yield from self._emit(window)

    def _emit(self, window: Any) -> Iterator[WindowedValue]:
        batch = self._batches.pop(window)
        start = self.clock()
        # the time until the generator resumes is what the fused steps downstream took
        yield WindowedValue(batch.elements, window.max_timestamp_us, (window,))
        elapsed = self.clock() - start
        self.sizer.record(batch.size, elapsed)
        if self.record_metrics:
            self._size_metric.update(batch.size)
            self._time_metric.update(int(elapsed * 1000))
        self._target = self.sizer.next_size()


class BatchElements(PTransform):
    """Groups the elements of each bundle and window into lists of between `min_batch_size` and
    `max_batch_size` elements (by `element_size_fn`), sized to amortise a fixed per-batch cost.

    As in Beam: a batch never spans windows and is emitted at the end of its window; the size
    adapts to the measured cost of the steps fused after it (see `_BatchSizer`: a plainer
    estimator than Beam's); a batch is closed before an element would take it past the target
    size, so batches are at most `max_batch_size` unless one element alone is larger. Batches
    never span bundles: `max_batch_duration_secs` (Beam's stateful batching across bundles) is
    refused. `variance` is accepted and not used (no random smearing of sizes here).
    """

    def __init__(self, min_batch_size: int = 1, max_batch_size: int = 10000,
                 target_batch_overhead: Optional[float] = .05,
                 target_batch_duration_secs: Optional[float] = 10,
                 target_batch_duration_secs_including_fixed_cost: Optional[float] = None,
                 max_batch_duration_secs: Optional[float] = None, *,
                 element_size_fn: Callable[[Any], int] = _one, variance: float = 0.25,
                 clock: Callable[[], float] = time.time, record_metrics: bool = True,
                 length_fn: Optional[Callable[[Any], int]] = None,
                 bucket_boundaries: Optional[List[int]] = None) -> None:
        super().__init__()
        where = "BatchElements"
        for name, v in (("min_batch_size", min_batch_size), ("max_batch_size", max_batch_size)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InvalidArgumentError(f"{where}({name}={v!r}) must be a positive int")
        if min_batch_size > max_batch_size:
            raise InvalidArgumentError(
                f"{where}: min_batch_size ({min_batch_size}) must not be greater than "
                f"max_batch_size ({max_batch_size})")
        if target_batch_overhead and not 0 < target_batch_overhead <= 1:
            raise InvalidArgumentError(
                f"{where}(target_batch_overhead={target_batch_overhead!r}) must be between 0 and 1")
        for name, d in (("target_batch_duration_secs", target_batch_duration_secs),
                        ("target_batch_duration_secs_including_fixed_cost",
                         target_batch_duration_secs_including_fixed_cost)):
            if d and d <= 0:
                raise InvalidArgumentError(f"{where}({name}={d!r}) must be positive")
        if not (target_batch_overhead or target_batch_duration_secs
                or target_batch_duration_secs_including_fixed_cost):
            raise InvalidArgumentError(
                f"{where}: at least one of target_batch_overhead, target_batch_duration_secs and "
                "target_batch_duration_secs_including_fixed_cost must be positive")
        if bucket_boundaries is not None and length_fn is None:
            raise InvalidArgumentError(f"{where}: bucket_boundaries requires length_fn to be set")
        if bucket_boundaries is not None and (
                not bucket_boundaries or any(b <= 0 for b in bucket_boundaries)
                or list(bucket_boundaries) != sorted(bucket_boundaries)):
            raise InvalidArgumentError(
                f"{where}(bucket_boundaries={bucket_boundaries!r}) must be a non-empty sorted list "
                "of positive values")
        if max_batch_duration_secs is not None:
            raise UnsupportedArgumentError(
                f"{where}(max_batch_duration_secs={max_batch_duration_secs!r}): batching across "
                "bundles needs a stateful DoFn, which headrace's BatchElements does not use; drop "
                "the argument (batches then end with each bundle: raise --bundle_size for larger "
                "ones)")
        if not callable(element_size_fn):
            raise InvalidArgumentError(
                f"{where}(element_size_fn={element_size_fn!r}) must be callable as fn(element) -> int")
        self._sizer = _BatchSizer(min_batch_size, max_batch_size, target_batch_overhead,
                                  target_batch_duration_secs,
                                  target_batch_duration_secs_including_fixed_cost)
        self._element_size_fn = element_size_fn
        self._clock = clock
        self._record_metrics = record_metrics

    def expand(self, pcoll: Any) -> Any:
        return pcoll | ParDo(_BatchElementsDoFn(self._sizer, self._element_size_fn, self._clock,
                                                self._record_metrics))


# ---------------------------------------------------------------------------------------
# ToString, LogElements, Reify, Tee


def _join_str(xs: Any, delimiter: str) -> str:
    return delimiter.join(str(x) for x in xs)


class ToString:
    """Elements to strings: `ToString.Element()`, `ToString.Iterables(delimiter=',')` (= `Kvs`)."""

    @staticmethod
    def Element() -> PTransform:
        """Each element as `str(element)`."""
        return "ElementToString" >> Map(str)

    @staticmethod
    def Iterables(delimiter: Optional[str] = None) -> PTransform:
        """Each iterable element (a (key, value) pair too) as its items' strings joined by
        `delimiter` (default ","), with no trailing delimiter."""
        return "IterablesToString" >> Map(_join_str, "," if delimiter is None else delimiter)

    Kvs = Iterables


class _LoggingFn(DoFn):
    """Logs (or prints) each element and passes it on."""

    def __init__(self, prefix: str, with_timestamp: bool, with_window: bool, level: Optional[int],
                 with_pane_info: bool, use_epoch_time: bool) -> None:
        self.prefix, self.level = prefix, level
        self.with_timestamp, self.with_window = with_timestamp, with_window
        self.with_pane_info, self.use_epoch_time = with_pane_info, use_epoch_time

    def _time(self, t: Timestamp) -> Any:
        return t.seconds() if self.use_epoch_time else t.to_rfc3339()

    def process(self, element: Any, timestamp: Any = DoFn.TimestampParam,
                window: Any = DoFn.WindowParam, pane_info: Any = DoFn.PaneInfoParam):
        line = self.prefix + str(element)
        if self.with_timestamp:
            line += ", timestamp=" + repr(self._time(timestamp))
        if self.with_window:
            if isinstance(window, GlobalWindow):
                line += ", window=GlobalWindow"
            else:
                line += (f", window(start={self._time(window.start)}, "
                         f"end={self._time(window.end)})")
        if self.with_pane_info:
            line += ", pane_info=" + repr(pane_info)
        if self.level is None:
            print(line)
        else:
            _LOGGER.log(self.level, line)
        yield element


class LogElements(PTransform):
    """Prints each element (or logs it at `level` on the `headrace.transforms.util` logger) and
    passes it on; `prefix`, and the element's timestamp, window and pane on request."""

    def __init__(self, label: Optional[str] = None, prefix: str = "", with_timestamp: bool = False,
                 with_window: bool = False, level: Optional[int] = None,
                 with_pane_info: bool = False, use_epoch_time: bool = False) -> None:
        super().__init__(label)
        if level is not None and (isinstance(level, bool) or not isinstance(level, int)):
            raise InvalidArgumentError(
                f"LogElements(level={level!r}) must be a logging level such as logging.INFO, or "
                "None to print")
        self.prefix, self.level = prefix, level
        self.with_timestamp, self.with_window = with_timestamp, with_window
        self.with_pane_info, self.use_epoch_time = with_pane_info, use_epoch_time

    def expand(self, pcoll: Any) -> Any:
        return pcoll | ParDo(_LoggingFn(self.prefix, self.with_timestamp, self.with_window,
                                        self.level, self.with_pane_info, self.use_epoch_time))


class _AddTimestamp(DoFn):
    def process(self, element: Any, timestamp: Any = DoFn.TimestampParam):
        yield TimestampedValue(element, timestamp)


class _AddWindow(DoFn):
    def process(self, element: Any, timestamp: Any = DoFn.TimestampParam,
                window: Any = DoFn.WindowParam):
        yield TimestampedValue((element, timestamp, window), timestamp)


class _AddTimestampInValue(DoFn):
    def process(self, element: Any, timestamp: Any = DoFn.TimestampParam):
        key, value = element
        yield (key, TimestampedValue(value, timestamp))


class _AddWindowInValue(DoFn):
    def process(self, element: Any, timestamp: Any = DoFn.TimestampParam,
                window: Any = DoFn.WindowParam):
        key, value = element
        yield TimestampedValue((key, (value, timestamp, window)), timestamp)


class Reify:
    """Makes an element's timestamp or window part of its value (Beam's `util.Reify`)."""

    class Timestamp(PTransform):
        """Outputs `TimestampedValue(element, its timestamp)` from a ParDo, which (as in Beam)
        unwraps it again: the elements and timestamps come out unchanged."""

        def expand(self, pcoll: Any) -> Any:
            return pcoll | ParDo(_AddTimestamp())

    class Window(PTransform):
        """Each element as `(element, timestamp, window)` (an element of n windows: n outputs)."""

        def expand(self, pcoll: Any) -> Any:
            return pcoll | ParDo(_AddWindow())

    class TimestampInValue(PTransform):
        """Each (key, value) as `(key, TimestampedValue(value, timestamp))`."""

        def expand(self, pcoll: Any) -> Any:
            return pcoll | ParDo(_AddTimestampInValue()).with_output_types(KV_TYPE)

    class WindowInValue(PTransform):
        """Each (key, value) as `(key, (value, timestamp, window))`."""

        def expand(self, pcoll: Any) -> Any:
            return pcoll | ParDo(_AddWindowInValue()).with_output_types(KV_TYPE)


class Tee(PTransform):
    """Returns its input unchanged and also applies each of `consumers` (PTransforms, or
    callables of a PCollection) to it, like the shell's `tee`."""

    def __init__(self, *consumers: Union[PTransform, Callable[[Any], Any]]) -> None:
        super().__init__()
        for c in consumers:
            if not (isinstance(c, PTransform) or callable(c)):
                raise InvalidArgumentError(
                    f"Tee needs PTransforms or callables of a PCollection, got {c!r}")
        self._consumers = consumers

    def expand(self, pcoll: Any) -> Any:
        for consumer in self._consumers:
            if isinstance(consumer, PTransform):
                _ = pcoll | consumer
            else:
                _ = pcoll | ptransform_fn(consumer)()
        return pcoll


# ---------------------------------------------------------------------------------------
# Regex


def _compile(regex: Any) -> Any:
    if isinstance(regex, str):
        try:
            return re.compile(regex)
        except re.error as exc:
            raise InvalidArgumentError(f"Regex: {regex!r} is not a valid regular expression: {exc}") from None
    if isinstance(regex, re.Pattern):
        return regex
    raise InvalidArgumentError(
        f"Regex needs a regular expression as a str or a compiled pattern, got {regex!r}")


class _RegexFn:
    """One Regex method's per-element function (picklable: the pattern travels compiled)."""

    def __init__(self, kind: str, regex: Any, a: Any = None, b: Any = None) -> None:
        self.kind, self.regex, self.a, self.b = kind, regex, a, b

    def __call__(self, element: str) -> Any:
        regex, kind, a, b = self.regex, self.kind, self.a, self.b
        if kind == "matches":
            m = regex.match(element)
            return [m.group(a)] if m else []
        if kind == "all_matches":
            m = regex.match(element)
            if not m:
                return []
            return [[m.group(i) for i in range((m.lastindex or 0) + 1)]]
        if kind == "matches_kv":
            m = regex.match(element)
            return [(m.group(a), m.group(b))] if m else []
        if kind == "find":
            m = regex.search(element)
            return [m.group(a)] if m else []
        if kind == "find_all":
            found = regex.finditer(element)
            if a == Regex.ALL:
                return [[(m.group(), m.groups()[0]) for m in found if b or m.groups()[0]]]
            return [[m.group(a) for m in found if b or m.group(a)]]
        if kind == "find_kv":
            return [(m.group(a), m.group(b)) for m in regex.finditer(element)]
        if kind == "replace_all":
            return regex.sub(a, element)
        if kind == "replace_first":
            return regex.sub(a, element, 1)
        parts = regex.split(element)  # split
        return [parts if a else [p for p in parts if p]]

    def default_label(self) -> str:
        """The Beam method's name."""
        return self.kind


def _regex_flatmap(kind: str, regex: Any, a: Any = None, b: Any = None) -> PTransform:
    return FlatMap(_RegexFn(kind, _compile(regex), a, b))


class Regex:
    """Regular-expression transforms of str elements, with Beam's semantics (`re.match` anchors
    at the start only: end the pattern with `$` to match whole elements)."""

    ALL = "__regex_all_groups"

    @staticmethod
    def matches(regex: Any, group: Union[int, str] = 0) -> PTransform:
        """`group` of the elements whose beginning matches `regex`; others are dropped."""
        return _regex_flatmap("matches", regex, group)

    @staticmethod
    def all_matches(regex: Any) -> PTransform:
        """`[group 0, group 1, ..., last matched group]` of the elements whose beginning matches."""
        return _regex_flatmap("all_matches", regex)

    @staticmethod
    def matches_kv(regex: Any, keyGroup: Union[int, str], valueGroup: Union[int, str] = 0) -> PTransform:
        """(keyGroup, valueGroup) of the elements whose beginning matches `regex`."""
        return _regex_flatmap("matches_kv", regex, keyGroup, valueGroup)

    @staticmethod
    def find(regex: Any, group: Union[int, str] = 0) -> PTransform:
        """`group` of the first match of `regex` anywhere in each element; no match: dropped."""
        return _regex_flatmap("find", regex, group)

    @staticmethod
    def find_all(regex: Any, group: Union[int, str] = 0, outputEmpty: bool = True) -> PTransform:
        """For each element, the list of `group` of every match (empty matches dropped unless
        `outputEmpty`); with `group=Regex.ALL`, a list of (whole match, first group) pairs."""
        return _regex_flatmap("find_all", regex, group, outputEmpty)

    @staticmethod
    def find_kv(regex: Any, keyGroup: Union[int, str], valueGroup: Union[int, str] = 0) -> PTransform:
        """(keyGroup, valueGroup) of every match of `regex` anywhere in each element."""
        return _regex_flatmap("find_kv", regex, keyGroup, valueGroup)

    @staticmethod
    def replace_all(regex: Any, replacement: str) -> PTransform:
        """Each element with every match of `regex` replaced by `replacement` (`re.sub` syntax)."""
        return Map(_RegexFn("replace_all", _compile(regex), replacement))

    @staticmethod
    def replace_first(regex: Any, replacement: str) -> PTransform:
        """Each element with its first match of `regex` replaced by `replacement`."""
        return Map(_RegexFn("replace_first", _compile(regex), replacement))

    @staticmethod
    def split(regex: Any, outputEmpty: bool = False) -> PTransform:
        """Each element as the list of its parts between matches of `regex` (`re.split`; empty
        parts dropped unless `outputEmpty`)."""
        return _regex_flatmap("split", regex, bool(outputEmpty))
