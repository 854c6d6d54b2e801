"""Side inputs as every runner reads them: `SideInputReader` (a view of a side input for a
main-input window) and `SideInputCombiner` (a combine's CombineFn with side inputs bound per
window)."""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Sequence, Tuple

from headrace.errors import PipelineExecutionError
from headrace.model.combine import BoundCombineFn, combine_values
from headrace.model.window import side_input_window
from headrace.pipeline.pvalue import AsSideInput, EmptySideInput


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
            args, kwargs = replace_views(self.args, self.kwargs, lambda view: reader.view(view, window))
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


def replace_views(args: Sequence[Any], kwargs: Dict[str, Any], swap: Callable[[AsSideInput], Any]
                  ) -> Tuple[Tuple[Any, ...], Dict[str, Any]]:
    """`args` and `kwargs` with every side-input view replaced by `swap(view)`."""
    return (tuple(swap(a) if isinstance(a, AsSideInput) else a for a in args),
            {k: swap(v) if isinstance(v, AsSideInput) else v for k, v in kwargs.items()})
