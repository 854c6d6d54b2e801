"""PTransform: composable graph-building steps, applied with `|` and labelled with `>>`."""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, Callable, Optional

from headrace.errors import InvalidArgumentError, PipelineConstructionError, UnsupportedArgumentError
from headrace.typehints.decorators import declared_hints
from headrace.typehints.typehints import is_consistent_with

if TYPE_CHECKING:
    from headrace.pipeline.pipeline import Pipeline


class PTransform:
    """A step or composite of steps; subclasses implement `expand(input)` (composites) or are primitives."""

    #: The pipeline the transform is applied to: set by `Pipeline.apply` before `expand` runs,
    #: so `expand` may rely on it (None only on a transform never applied).
    pipeline: "Pipeline" = None  # type: ignore[assignment]
    _user_label: Optional[str] = None

    def __init__(self, label: Optional[str] = None) -> None:
        if label is not None and not isinstance(label, str):
            raise InvalidArgumentError(f"a transform label must be a str, got {label!r}")
        self._user_label = label

    @property
    def label(self) -> str:
        """The label this transform is applied under unless one is given with `>>`."""
        return self._user_label or self.default_label()

    @label.setter
    def label(self, value: str) -> None:
        self._user_label = value

    def default_label(self) -> str:
        """The label used when none is given: the class name."""
        return type(self).__name__

    def expand(self, input_or_inputs: Any) -> Any:
        """Builds this transform's sub-graph on its input and returns the output PCollection(s)."""
        raise NotImplementedError(
            f"{type(self).__name__} must implement expand(self, pcoll) returning its output")

    def with_input_types(self, input_type_hint: Any, *side_inputs_arg_hints: Any,
                         **side_input_kwarg_hints: Any) -> "PTransform":
        """Declares the input element type, checked against the input when the transform is applied.

        The input's element type must be consistent with it (`typehints.is_consistent_with`:
        e.g. `int` elements cannot feed a step declaring `str`, and a key-value hint such as
        `Tuple[str, int]` rejects an input known not to hold pairs), else applying the step
        raises `TypeCheckError` naming both steps (unless --no_pipeline_type_check). Hints for
        side inputs are refused: headrace does not check them.
        """
        if side_inputs_arg_hints or side_input_kwarg_hints:
            raise UnsupportedArgumentError(
                f"{self.label}.with_input_types: type hints for side inputs are not checked by "
                "headrace; pass only the main input's type, e.g. with_input_types(int)")
        self._input_type = input_type_hint
        return self

    def get_input_type(self) -> Any:
        """The declared input type (`with_input_types`, else the type hints of the transform's
        class or function), or None when undeclared."""
        declared = getattr(self, "_input_type", None)
        return declared if declared is not None else self._hinted_input_type()

    def _hinted_input_type(self) -> Any:
        """The input type the transform's own hints give (its class's decorator here)."""
        return declared_hints(type(self)).input_type

    def with_output_types(self, type_hint: Any) -> "PTransform":
        """Records the output element type; it enables construction-time checks downstream."""
        self._output_type = type_hint
        return self

    def get_output_type(self) -> Any:
        """The declared output type (`with_output_types`, else the decorator of the transform's
        class), or None when unknown."""
        declared = getattr(self, "_output_type", None)
        return declared if declared is not None else declared_hints(type(self)).output_type

    def __rrshift__(self, label: str) -> "PTransform":
        if not isinstance(label, str):
            raise InvalidArgumentError(f"`label >> transform` needs a str label, got {label!r}")
        return _NamedPTransform(self, label)

    def __or__(self, right: Any) -> "PTransform":
        if isinstance(right, PTransform):
            return _ChainedPTransform(self, right)
        return NotImplemented

    def __ror__(self, left: Any) -> Any:
        from headrace.pipeline.pipeline import Pipeline
        pipeline = _pipeline_of(left) or self._default_pipeline()
        if pipeline is None:
            raise PipelineConstructionError(
                f"cannot apply {self.label!r} to {type(left).__name__} {left!r}; apply transforms to "
                "a Pipeline, a PCollection, or a tuple/list/dict of PCollections")
        if isinstance(left, Pipeline):
            return left.apply(self)
        return pipeline.apply(self, left)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.label!r}>"

    def _default_pipeline(self) -> Any:
        """The pipeline given to the transform itself (e.g. Flatten(pipeline=p)), if any."""
        return getattr(self, "_pipeline_arg", None)


def _pipeline_of(value: Any):
    from headrace.pipeline.pipeline import Pipeline
    from headrace.pipeline.pvalue import PValue
    if isinstance(value, Pipeline):
        return value
    if isinstance(value, PValue):
        return value.pipeline
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        for v in value:
            if isinstance(v, PValue):
                return v.pipeline
    return None


class _NamedPTransform(PTransform):
    """A transform applied under an explicit label."""

    def __init__(self, transform: PTransform, label: str) -> None:
        if not isinstance(transform, PTransform):
            raise InvalidArgumentError(
                f"`{label!r} >> x` needs a transform on the right, got {type(transform).__name__}")
        super().__init__(label)
        self.transform = transform

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.__dict__["transform"], name)

    def with_input_types(self, input_type_hint: Any, *side_inputs_arg_hints: Any,
                         **side_input_kwarg_hints: Any) -> "PTransform":
        """Declares the input type of the named transform (see PTransform.with_input_types)."""
        self.transform.with_input_types(input_type_hint, *side_inputs_arg_hints,
                                        **side_input_kwarg_hints)
        return self

    def with_output_types(self, type_hint: Any) -> "PTransform":
        """Declares the output type of the named transform."""
        self.transform.with_output_types(type_hint)
        return self

    def expand(self, input_or_inputs: Any) -> Any:
        raise PipelineConstructionError("internal: a named transform is unwrapped by Pipeline.apply")


class _ChainedPTransform(PTransform):
    """`t1 | t2` as one composite transform."""

    def __init__(self, *parts: PTransform) -> None:
        super().__init__(None)
        self._parts = parts

    def default_label(self) -> str:
        return "|".join(p.label for p in self._parts)

    def __or__(self, right: Any) -> "PTransform":
        if isinstance(right, PTransform):
            return _ChainedPTransform(*self._parts, right)
        return NotImplemented

    def expand(self, pval: Any) -> Any:
        for p in self._parts:
            pval = pval | p
        return pval


class _PTransformFnPTransform(PTransform):
    def __init__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        super().__init__(None)
        self._fn, self._args, self._kwargs = fn, args, kwargs

    def default_label(self) -> str:
        return self._fn.__name__

    def expand(self, pcoll: Any) -> Any:
        return self._fn(pcoll, *self._args, **self._kwargs)


def ptransform_fn(fn: Callable[..., Any]) -> Callable[..., PTransform]:
    """Turns `fn(pcoll, *args)` into a factory of composite transforms (Beam's decorator)."""

    def factory(*args: Any, **kwargs: Any) -> PTransform:
        return _PTransformFnPTransform(fn, *args, **kwargs)

    factory.__name__ = fn.__name__
    factory.__doc__ = fn.__doc__
    return factory


def label_from_callable(fn: Any) -> str:
    """A readable label for a callable: its name, or `<lambda at file:line>`."""
    if hasattr(fn, "default_label") and not inspect.isfunction(fn):
        try:
            return fn.default_label()
        except Exception:
            pass
    name = getattr(fn, "__name__", None)
    if name == "<lambda>":
        try:
            code = fn.__code__
            return f"<lambda at {code.co_filename.rsplit('/', 1)[-1]}:{code.co_firstlineno}>"
        except AttributeError:
            return "<lambda>"
    if name:
        return name
    return type(fn).__name__


def input_type_conflict(declared: Any, actual: Any) -> bool:
    """True when an input whose elements are of type `actual` cannot match the hint `declared`
    (only what is certain counts: see `typehints.is_consistent_with`)."""
    if declared is None or actual is None:
        return False
    return not is_consistent_with(actual, declared)
