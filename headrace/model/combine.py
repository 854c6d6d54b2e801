"""The CombineFn protocol (with `retract_input` for retractions) and the built-in combine functions."""

from __future__ import annotations

import heapq
from abc import ABC, abstractmethod
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple

from headrace.errors import InvalidArgumentError


class CombineFn(ABC):
    """An associative, commutative aggregation: create, add, merge, compact and extract accumulators.

    An abstract base class: `create_accumulator`, `add_input`, `merge_accumulators` and
    `extract_output` are abstract; `setup`, `teardown`, `add_inputs`, `compact` and
    `retract_input` (optional: see `can_retract`) have defaults.
    """

    def setup(self, *args: Any, **kwargs: Any) -> None:
        """Called once per instance before use."""

    def teardown(self, *args: Any, **kwargs: Any) -> None:
        """Called once per instance when it is discarded."""

    @abstractmethod
    def create_accumulator(self, *args: Any, **kwargs: Any) -> Any:
        """Returns a fresh, empty accumulator."""
        raise NotImplementedError(f"{type(self).__name__} must implement create_accumulator")

    @abstractmethod
    def add_input(self, mutable_accumulator: Any, element: Any, *args: Any, **kwargs: Any) -> Any:
        """Returns the accumulator with one more input (may mutate and return the argument)."""
        raise NotImplementedError(f"{type(self).__name__} must implement add_input")

    def add_inputs(self, mutable_accumulator: Any, elements: Iterable[Any], *args: Any,
                   **kwargs: Any) -> Any:
        """Returns the accumulator with all of `elements` added."""
        for e in elements:
            mutable_accumulator = self.add_input(mutable_accumulator, e, *args, **kwargs)
        return mutable_accumulator

    @abstractmethod
    def merge_accumulators(self, accumulators: Iterable[Any], *args: Any, **kwargs: Any) -> Any:
        """Returns one accumulator combining all of `accumulators` (the first may be mutated)."""
        raise NotImplementedError(f"{type(self).__name__} must implement merge_accumulators")

    def compact(self, accumulator: Any, *args: Any, **kwargs: Any) -> Any:
        """Returns a smaller equivalent accumulator before it is stored or shuffled."""
        return accumulator

    @abstractmethod
    def extract_output(self, accumulator: Any, *args: Any, **kwargs: Any) -> Any:
        """Returns the result for an accumulator."""
        raise NotImplementedError(f"{type(self).__name__} must implement extract_output")

    def retract_input(self, mutable_accumulator: Any, element: Any) -> Any:
        """Returns the accumulator with one earlier input withdrawn (NotImplementedError if impossible)."""
        raise NotImplementedError

    def can_retract(self) -> bool:
        """True when `retract_input` is implemented (else retractions recompute from inputs)."""
        return type(self).retract_input is not CombineFn.retract_input

    def apply(self, elements: Iterable[Any], *args: Any, **kwargs: Any) -> Any:
        """Combines an iterable of inputs in one go."""
        return self.extract_output(
            self.add_inputs(self.create_accumulator(*args, **kwargs), elements, *args, **kwargs),
            *args, **kwargs)

    def default_label(self) -> str:
        """The label used when this CombineFn is applied without one."""
        return type(self).__name__

    @staticmethod
    def from_callable(fn: Callable[[Iterable[Any]], Any]) -> "CombineFn":
        """Wraps a function of an iterable (like `sum`) as a CombineFn."""
        return CallableWrapperCombineFn(fn)

    @staticmethod
    def maybe_from_callable(fn: Any, has_side_inputs: bool = True) -> "CombineFn":
        """Returns `fn` if it is a CombineFn, wraps it if it is callable, else raises."""
        if isinstance(fn, CombineFn):
            return fn
        if isinstance(fn, type) and issubclass(fn, CombineFn):
            raise InvalidArgumentError(
                f"got the CombineFn class {fn.__name__}; pass an instance: {fn.__name__}()")
        if callable(fn):
            return CallableWrapperCombineFn(fn)
        raise InvalidArgumentError(
            f"expected a CombineFn or a callable such as sum, got {type(fn).__name__} {fn!r}")


class _Empty:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<empty>"

    def __reduce__(self) -> Tuple[Callable[[], "_Empty"], Tuple[()]]:
        return (_empty, ())


def _empty() -> "_Empty":
    return EMPTY


EMPTY = _Empty.__new__(_Empty)


class CallableWrapperCombineFn(CombineFn):
    """Wraps `fn(iterable) -> value`; buffers inputs and compacts them by calling `fn` on the buffer.

    As in Beam, `fn` must be associative and commutative (`sum`, `max`, `lambda vs: min(sum(vs),
    cap)`): it is applied to partial buffers and then to its own results, in an order that depends
    on bundles and, on Spark, on the partitions combined before the shuffle."""

    _BUFFER = 10

    def __init__(self, fn: Callable[..., Any], buffer_size: int = _BUFFER) -> None:
        if not callable(fn):
            raise InvalidArgumentError(f"CombineFn needs a callable, got {fn!r}")
        self._fn = fn
        self._buffer_size = buffer_size

    def create_accumulator(self, *args: Any, **kwargs: Any) -> List[Any]:
        return []

    def add_input(self, mutable_accumulator: List[Any], element: Any, *args: Any, **kwargs: Any) -> List[Any]:
        mutable_accumulator.append(element)
        if len(mutable_accumulator) > self._buffer_size:
            mutable_accumulator[:] = [self._fn(mutable_accumulator, *args, **kwargs)]
        return mutable_accumulator

    def add_inputs(self, mutable_accumulator: List[Any], elements: Iterable[Any], *args: Any, **kwargs: Any
                   ) -> List[Any]:
        mutable_accumulator.extend(elements)
        if len(mutable_accumulator) > self._buffer_size:
            mutable_accumulator[:] = [self._fn(mutable_accumulator, *args, **kwargs)]
        return mutable_accumulator

    def merge_accumulators(self, accumulators: Iterable[List[Any]], *args: Any, **kwargs: Any) -> List[Any]:
        out: List[Any] = []
        for a in accumulators:
            out.extend(a)
            if len(out) > self._buffer_size:
                out[:] = [self._fn(out, *args, **kwargs)]
        return out

    def compact(self, accumulator: List[Any], *args: Any, **kwargs: Any) -> List[Any]:
        return [self._fn(accumulator, *args, **kwargs)] if len(accumulator) > 1 else accumulator

    def extract_output(self, accumulator: List[Any], *args: Any, **kwargs: Any) -> Any:
        return self._fn(accumulator, *args, **kwargs)

    def default_label(self) -> str:
        return f"CombinePerKey({getattr(self._fn, '__name__', type(self._fn).__name__)})"

    def __repr__(self) -> str:
        return f"CallableWrapperCombineFn({self._fn!r})"


class BoundCombineFn(CombineFn):
    """A CombineFn with extra arguments bound: each method passes them on (Beam's curried CombineFn)."""

    def __init__(self, fn: CombineFn, args: Tuple[Any, ...] = (), kwargs: Optional[Dict[str, Any]] = None
                 ) -> None:
        self.fn = fn
        self.args = tuple(args)
        self.kwargs = dict(kwargs or {})

    def setup(self, *args: Any, **kwargs: Any) -> None:
        """Sets up the wrapped CombineFn."""
        self.fn.setup()

    def teardown(self, *args: Any, **kwargs: Any) -> None:
        """Tears down the wrapped CombineFn."""
        self.fn.teardown()

    def create_accumulator(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn.create_accumulator(*self.args, **self.kwargs)

    def add_input(self, mutable_accumulator: Any, element: Any, *args: Any, **kwargs: Any) -> Any:
        return self.fn.add_input(mutable_accumulator, element, *self.args, **self.kwargs)

    def add_inputs(self, mutable_accumulator: Any, elements: Iterable[Any], *args: Any, **kwargs: Any) -> Any:
        return self.fn.add_inputs(mutable_accumulator, elements, *self.args, **self.kwargs)

    def merge_accumulators(self, accumulators: Iterable[Any], *args: Any, **kwargs: Any) -> Any:
        return self.fn.merge_accumulators(accumulators, *self.args, **self.kwargs)

    def compact(self, accumulator: Any, *args: Any, **kwargs: Any) -> Any:
        return self.fn.compact(accumulator, *self.args, **self.kwargs)

    def extract_output(self, accumulator: Any, *args: Any, **kwargs: Any) -> Any:
        return self.fn.extract_output(accumulator, *self.args, **self.kwargs)

    def retract_input(self, mutable_accumulator: Any, element: Any) -> Any:
        return self.fn.retract_input(mutable_accumulator, element)

    def can_retract(self) -> bool:
        return self.fn.can_retract()

    def apply(self, elements: Iterable[Any], *args: Any, **kwargs: Any) -> Any:
        return self.fn.apply(elements, *self.args, **self.kwargs)

    def default_label(self) -> str:
        return self.fn.default_label()

    def __repr__(self) -> str:
        return f"BoundCombineFn({self.fn!r}, {self.args!r}, {self.kwargs!r})"


def combine_values(fn: CombineFn, values: Iterable[Any]) -> Any:
    """The output of `fn` for one group of values: accumulated, merged and extracted.

    The single accumulator goes through `merge_accumulators`, as the partial accumulators of a
    lifted combine do, so a CombineFn sees the same kinds of calls whether or not it is lifted.
    """
    return fn.extract_output(fn.merge_accumulators([fn.add_inputs(fn.create_accumulator(), values)]))


class SumCombineFn(CombineFn):
    """Sums numbers (what `CombinePerKey(sum)` runs); can retract by subtraction."""

    def create_accumulator(self) -> int:
        return 0

    def add_input(self, acc: Any, element: Any) -> Any:
        return acc + element

    def add_inputs(self, acc: Any, elements: Iterable[Any]) -> Any:
        return acc + sum(elements)

    def merge_accumulators(self, accumulators: Iterable[Any]) -> Any:
        return sum(accumulators)

    def extract_output(self, acc: Any) -> Any:
        return acc

    def retract_input(self, acc: Any, element: Any) -> Any:
        return acc - element

    def accumulators_from(self, totals: Sequence[Any], counts: Sequence[int]) -> Sequence[Any]:
        """The accumulators of groups whose inputs sum to `totals` (`counts` unused): the totals.

        For runners that combine the built-ins outside their CombineFn (vectorised), as do the
        `accumulators_from` of Count-, Mean-, Min- and MaxCombineFn. A total is Python's `sum`
        from 0, as `add_input` from `create_accumulator()` makes it (a float sum of -0.0s is 0.0)."""
        return totals


class _ExtremumCombineFn(CombineFn):
    _pick: Callable[[Any, Any], Any]
    _fn: Callable[..., Any]

    def create_accumulator(self) -> _Empty:
        return EMPTY

    def add_input(self, acc: Any, element: Any) -> Any:
        return element if acc is EMPTY else type(self)._pick(acc, element)

    def merge_accumulators(self, accumulators: Iterable[Any]) -> Any:
        acc: Any = EMPTY
        for a in accumulators:
            if a is not EMPTY:
                acc = a if acc is EMPTY else type(self)._pick(acc, a)
        return acc

    def extract_output(self, acc: Any) -> Any:
        return type(self)._fn([]) if acc is EMPTY else acc

    def accumulators_from(self, extrema: Sequence[Any], counts: Sequence[int]) -> Sequence[Any]:
        """The accumulators of groups whose smallest (Min) or largest (Max) inputs are `extrema`.

        Every group has at least one input (`counts`, unused); the accumulator of a group of
        inputs is its extremum."""
        return extrema


class MinCombineFn(_ExtremumCombineFn):
    """The smallest input (what `CombinePerKey(min)` runs)."""

    _pick = staticmethod(min)
    _fn = staticmethod(min)


class MaxCombineFn(_ExtremumCombineFn):
    """The largest input (what `CombinePerKey(max)` runs)."""

    _pick = staticmethod(max)
    _fn = staticmethod(max)


_BUILTIN_FNS: Dict[Any, Callable[[], CombineFn]] = {sum: SumCombineFn, min: MinCombineFn, max: MaxCombineFn}


def as_combine_fn(fn: Any, has_args: bool = False) -> CombineFn:
    """Turns `fn` (a CombineFn, or a callable of an iterable such as `sum`) into a CombineFn.

    With `has_args` a callable is always wrapped as it is, so that it receives the extra
    arguments (`sum(values, start)`), as in Beam.
    """
    special = (_BUILTIN_FNS.get(fn) if callable(fn) and not isinstance(fn, CombineFn)
               and not has_args else None)
    if special is not None:
        return special()
    return CombineFn.maybe_from_callable(fn)


class CountCombineFn(CombineFn):
    """Counts its inputs."""

    def create_accumulator(self) -> int:
        return 0

    def add_input(self, acc: int, element: Any) -> int:
        return acc + 1

    def add_inputs(self, acc: int, elements: Iterable[Any]) -> int:
        return acc + sum(1 for _ in elements)

    def merge_accumulators(self, accumulators: Iterable[int]) -> int:
        return sum(accumulators)

    def extract_output(self, acc: int) -> int:
        return acc

    def retract_input(self, acc: int, element: Any) -> int:
        return acc - 1

    def accumulators_from(self, totals: Sequence[Any], counts: Sequence[int]) -> Sequence[int]:
        """The accumulators of groups of `counts` inputs (`totals` unused): the counts themselves."""
        return counts


class MeanCombineFn(CombineFn):
    """The arithmetic mean of its inputs (NaN for none)."""

    def create_accumulator(self) -> Tuple[int, int]:
        return (0, 0)

    def add_input(self, acc: Tuple[Any, int], element: Any) -> Tuple[Any, int]:
        return (acc[0] + element, acc[1] + 1)

    def merge_accumulators(self, accumulators: Iterable[Tuple[Any, int]]) -> Tuple[Any, int]:
        s = c = 0
        for a_s, a_c in accumulators:
            s += a_s
            c += a_c
        return (s, c)

    def extract_output(self, acc: Tuple[Any, int]) -> Any:
        return acc[0] / acc[1] if acc[1] else float("NaN")

    def retract_input(self, acc: Tuple[Any, int], element: Any) -> Tuple[Any, int]:
        return (acc[0] - element, acc[1] - 1)

    def accumulators_from(self, totals: Sequence[Any], counts: Sequence[int]
                          ) -> Sequence[Tuple[Any, int]]:
        """The accumulators of groups of `counts` inputs that sum to `totals`: (total, count).

        A total is Python's `sum` from 0, as SumCombineFn's (a float sum of -0.0s is 0.0)."""
        return list(zip(totals, counts))


class ToListCombineFn(CombineFn):
    """Collects its inputs into a list."""

    def create_accumulator(self) -> List[Any]:
        return []

    def add_input(self, acc: List[Any], element: Any) -> List[Any]:
        acc.append(element)
        return acc

    def add_inputs(self, acc: List[Any], elements: Iterable[Any]) -> List[Any]:
        acc.extend(elements)
        return acc

    def merge_accumulators(self, accumulators: Iterable[List[Any]]) -> List[Any]:
        out: List[Any] = []
        for a in accumulators:
            out.extend(a)
        return out

    def extract_output(self, acc: List[Any]) -> List[Any]:
        return acc

    def retract_input(self, acc: List[Any], element: Any) -> List[Any]:
        acc.remove(element)
        return acc


class ToSetCombineFn(CombineFn):
    """Collects its distinct inputs into a set."""

    def create_accumulator(self) -> Set[Any]:
        return set()

    def add_input(self, acc: Set[Any], element: Any) -> Set[Any]:
        acc.add(element)
        return acc

    def merge_accumulators(self, accumulators: Iterable[Set[Any]]) -> Set[Any]:
        out: Set[Any] = set()
        for a in accumulators:
            out |= a
        return out

    def extract_output(self, acc: Set[Any]) -> Set[Any]:
        return acc


class ToDictCombineFn(CombineFn):
    """Collects (key, value) inputs into a dict."""

    def create_accumulator(self) -> Dict[Any, Any]:
        return {}

    def add_input(self, acc: Dict[Any, Any], element: Any) -> Dict[Any, Any]:
        k, v = element
        acc[k] = v
        return acc

    def merge_accumulators(self, accumulators: Iterable[Dict[Any, Any]]) -> Dict[Any, Any]:
        out: Dict[Any, Any] = {}
        for a in accumulators:
            out.update(a)
        return out

    def extract_output(self, acc: Dict[Any, Any]) -> Dict[Any, Any]:
        return acc


class _Keyed:
    """Orders items by a key (and optionally reversed) for the heap inside TopCombineFn."""

    __slots__ = ("k", "item", "rev")

    def __init__(self, k: Any, item: Any, rev: bool) -> None:
        self.k, self.item, self.rev = k, item, rev

    def __lt__(self, other: "_Keyed") -> bool:
        lt: bool = other.k < self.k if self.rev else self.k < other.k  # the keys' `<`
        return lt


class _TopAcc:
    """TopCombineFn's accumulator: a bounded min-heap of `_Keyed` (the worst kept at the root)
    and the log of the inputs the heap admitted, in order (None once longer than its bound)."""

    __slots__ = ("heap", "log")

    def __init__(self, heap: List[_Keyed], log: Optional[List[_Keyed]]) -> None:
        self.heap, self.log = heap, log

    def __getstate__(self) -> Tuple[List[_Keyed], Optional[List[_Keyed]]]:
        return self.heap, self.log

    def __setstate__(self, state: Tuple[List[_Keyed], Optional[List[_Keyed]]]) -> None:
        self.heap, self.log = state


class TopCombineFn(CombineFn):
    """The `n` largest inputs (by `key`, or smallest when `reverse=True`), sorted best first.

    Among inputs that compare equal, the ones kept and their order are Beam's: inputs enter a
    bounded min-heap one by one (`heapq`: a new input replaces the root only when greater, so
    an input equal to the worst kept one is dropped), and the output is that heap sorted
    best first by a stable sort. Merging accumulators gives what adding their inputs one by one
    in the accumulators' order would give: each accumulator logs the inputs its heap admitted
    (an input its own heap dropped would be dropped by any heap holding more), and the later
    accumulators' logs are replayed into the first one's heap. A log longer than
    `8 * n + 64` is dropped; such an accumulator is merged by adding its kept inputs (Beam's
    own merge). docs/semantics.md ("Top among equal elements") states the rule.
    """

    def __init__(self, n: int, key: Optional[Callable[[Any], Any]] = None, reverse: bool = False) -> None:
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise InvalidArgumentError(f"Top needs a non-negative int n, got {n!r}")
        self._n, self._key, self._reverse = n, key, reverse
        self._log_bound = 8 * n + 64

    def _wrap(self, x: Any) -> _Keyed:
        return _Keyed(x if self._key is None else self._key(x), x, self._reverse)

    def _admit(self, acc: _TopAcc, item: _Keyed) -> None:
        """Adds one item to the heap as Beam's bounded heap does, logging it if admitted."""
        heap = acc.heap
        if len(heap) < self._n:
            heapq.heappush(heap, item)
        elif self._n and heap[0] < item:
            heapq.heapreplace(heap, item)
        else:
            return
        log = acc.log
        if log is not None:
            log.append(item)
            if len(log) > self._log_bound:
                acc.log = None

    def create_accumulator(self) -> _TopAcc:
        return _TopAcc([], [])

    def add_input(self, acc: _TopAcc, element: Any) -> _TopAcc:
        self._admit(acc, self._wrap(element))
        return acc

    def merge_accumulators(self, accumulators: Iterable[_TopAcc]) -> _TopAcc:
        out: Optional[_TopAcc] = None
        for a in accumulators:
            if out is None:  # the first one's heap is the base (copied: inputs stay unchanged)
                out = _TopAcc(list(a.heap), None if a.log is None else list(a.log))
            elif a.log is not None:  # replayed: as if its inputs followed the base's
                for item in a.log:
                    self._admit(out, item)
            else:
                for item in list(a.heap):  # its log was dropped: its kept items, in heap order
                    self._admit(out, item)
                out.log = None
        return out if out is not None else self.create_accumulator()

    def compact(self, acc: _TopAcc) -> _TopAcc:
        return acc

    def extract_output(self, acc: _TopAcc) -> List[Any]:
        return [k.item for k in sorted(acc.heap, reverse=True)]

    def _extract_bundle_order(self, acc: _TopAcc) -> List[Any]:
        """The output of Beam's `Top.Of` in the default windowing: sorted ascending (stable), then
        reversed, so equal elements come in the reverse of `extract_output`'s order."""
        return [k.item for k in reversed(sorted(acc.heap))]


#: LatestCombineFn's accumulator: (value, timestamp_us) of the latest input, (None, None) for none.
_LatestAcc = Tuple[Any, Optional[int]]


class LatestCombineFn(CombineFn):
    """The input with the latest timestamp; inputs are (value, timestamp_us) pairs."""

    def create_accumulator(self) -> _LatestAcc:
        return (None, None)

    def add_input(self, acc: _LatestAcc, element: Tuple[Any, int]) -> _LatestAcc:
        value, ts = element
        return element if acc[1] is None or ts > acc[1] else acc

    def merge_accumulators(self, accumulators: Iterable[_LatestAcc]) -> _LatestAcc:
        best: _LatestAcc = (None, None)
        for a in accumulators:
            if a[1] is not None and (best[1] is None or a[1] > best[1]):
                best = a
        return best

    def extract_output(self, acc: _LatestAcc) -> Any:
        return acc[0]


class _TupleCombineFnBase(CombineFn):
    """What TupleCombineFn and SingleInputTupleCombineFn share: one CombineFn per position."""

    def __init__(self, *combiners: Any, merge_accumulators_batch_size: Optional[int] = None) -> None:
        self._combiners = [as_combine_fn(c) for c in combiners]
        self._merge_batch = merge_accumulators_batch_size or max(10, 1000 // max(1, len(combiners)))

    def setup(self, *args: Any, **kwargs: Any) -> None:
        """Sets up every CombineFn."""
        for c in self._combiners:
            c.setup(*args, **kwargs)

    def teardown(self, *args: Any, **kwargs: Any) -> None:
        """Tears down every CombineFn (in reverse order)."""
        for c in reversed(self._combiners):
            c.teardown(*args, **kwargs)

    def create_accumulator(self, *args: Any, **kwargs: Any) -> List[Any]:
        return [c.create_accumulator(*args, **kwargs) for c in self._combiners]

    def merge_accumulators(self, accumulators: Iterable[List[Any]], *args: Any, **kwargs: Any
                           ) -> List[Any]:
        it = iter(accumulators)
        try:
            result = next(it)
        except StopIteration:
            return self.create_accumulator(*args, **kwargs)
        while True:  # merged in batches, to bound the memory held at once
            batch = [result]
            for a in it:
                batch.append(a)
                if len(batch) > self._merge_batch:
                    break
            if len(batch) == 1:
                return result
            result = [c.merge_accumulators(list(accs), *args, **kwargs)
                      for c, accs in zip(self._combiners, zip(*batch))]

    def compact(self, accumulator: List[Any], *args: Any, **kwargs: Any) -> List[Any]:
        return [c.compact(a, *args, **kwargs) for c, a in zip(self._combiners, accumulator)]

    def extract_output(self, accumulator: List[Any], *args: Any, **kwargs: Any) -> Tuple[Any, ...]:
        return tuple(c.extract_output(a, *args, **kwargs) for c, a in zip(self._combiners, accumulator))


class TupleCombineFn(_TupleCombineFnBase):
    """Combines N-tuples position by position with N CombineFns (or callables like `sum`)."""

    def add_input(self, mutable_accumulator: List[Any], element: Any, *args: Any, **kwargs: Any
                  ) -> List[Any]:
        return [c.add_input(a, e, *args, **kwargs)
                for c, a, e in zip(self._combiners, mutable_accumulator, element)]

    def with_common_input(self) -> "SingleInputTupleCombineFn":
        """The SingleInputTupleCombineFn of the same CombineFns (each sees every input)."""
        return SingleInputTupleCombineFn(*self._combiners)


class SingleInputTupleCombineFn(_TupleCombineFnBase):
    """Applies each of N CombineFns to every input; outputs the N-tuple of their results."""

    def add_input(self, mutable_accumulator: List[Any], element: Any, *args: Any, **kwargs: Any
                  ) -> List[Any]:
        return [c.add_input(a, element, *args, **kwargs)
                for c, a in zip(self._combiners, mutable_accumulator)]


class ConcatListCombineFn(CombineFn):
    """Concatenates list inputs into one list."""

    def create_accumulator(self) -> List[Any]:
        return []

    def add_input(self, acc: List[Any], element: Any) -> List[Any]:
        acc.extend(element)
        return acc

    def merge_accumulators(self, accumulators: Iterable[List[Any]]) -> List[Any]:
        out: List[Any] = []
        for a in accumulators:
            out.extend(a)
        return out

    def extract_output(self, acc: List[Any]) -> List[Any]:
        return acc
