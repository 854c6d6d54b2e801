"""Values in a pipeline graph: PCollection, PBegin, PDone, tagged outputs and side-input views."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Iterator, Optional, Tuple

from headrace.errors import InvalidArgumentError, PipelineConstructionError

if TYPE_CHECKING:  # pragma: no cover
    from headrace.model.strategy import Windowing
    from headrace.pipeline.pipeline import AppliedPTransform, Pipeline


class PValue:
    """Something a transform can be applied to with `|`."""

    def __init__(self, pipeline: "Pipeline") -> None:
        self.pipeline = pipeline

    def __or__(self, ptransform: Any) -> Any:
        return self.pipeline.apply(ptransform, self)

    def apply(self, ptransform: Any, label: Optional[str] = None) -> Any:
        """Applies a transform to this value (same as `self | label >> ptransform`)."""
        return self.pipeline.apply(ptransform, self, label)


class PCollection(PValue):
    """A distributed, possibly unbounded collection of timestamped, windowed elements.

    `is_bounded` is False when the collection may grow forever (it descends from an unbounded
    source such as TestStream). `may_contain_retractions` is True when some elements may be
    retractions of earlier panes: the output of a grouping in ACCUMULATING_AND_RETRACTING
    mode, and everything element-wise or flattened downstream of it.
    """

    def __init__(self, pipeline: "Pipeline", producer: "AppliedPTransform", tag: Optional[str],
                 windowing: "Windowing", is_bounded: bool = True, element_type: Any = None,
                 may_contain_retractions: bool = False) -> None:
        super().__init__(pipeline)
        self.producer = producer
        self.tag = tag
        self.windowing = windowing
        self.is_bounded = is_bounded
        self.element_type = element_type
        self.may_contain_retractions = may_contain_retractions
        self.consumers: list = []
        self._id = pipeline._next_id()

    @property
    def label(self) -> str:
        """The producing step's label (with the output tag, if not the main output)."""
        base = self.producer.full_label
        return base if self.tag is None else f"{base}.{self.tag}"

    def windowing_strategy(self) -> "Windowing":
        """The windowing strategy of this PCollection."""
        return self.windowing

    def __repr__(self) -> str:
        return f"<PCollection {self.label}>"

    def __hash__(self) -> int:
        return self._id

    def __eq__(self, other: object) -> bool:
        return self is other

    def __iter__(self):
        raise PipelineConstructionError(
            f"PCollection {self.label!r} cannot be iterated while the pipeline is being built; "
            "read it inside a transform, or pass it to another step as a side input (AsList, AsIter)")


class PBegin(PValue):
    """The input of a root transform such as Create or ReadFromText."""

    def __repr__(self) -> str:
        return "<PBegin>"


class PDone(PValue):
    """The output of a transform that produces nothing (such as a sink's final step)."""


class TaggedOutput:
    """An output sent to the tagged output `tag` of a multi-output ParDo."""

    __slots__ = ("tag", "value")

    def __init__(self, tag: str, value: Any) -> None:
        if not isinstance(tag, str):
            raise InvalidArgumentError(f"TaggedOutput needs a str tag, got {tag!r}")
        self.tag = tag
        self.value = value

    def __repr__(self) -> str:
        return f"TaggedOutput({self.tag!r}, {self.value!r})"


class Row:
    """Beam's `beam.Row(name=value, ...)`: named fields read as attributes, equal by fields in order."""

    def __init__(self, **kwargs: Any) -> None:
        self.__dict__.update(kwargs)

    def as_dict(self) -> Dict[str, Any]:
        """The fields as a dict, in order."""
        return dict(self.__dict__)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.__dict__.values())

    def __eq__(self, other: Any) -> bool:
        return type(self) is type(other) and list(self.__dict__.items()) == list(other.__dict__.items())

    def __hash__(self) -> int:
        return hash(tuple(self.__dict__.items()))

    def __repr__(self) -> str:
        return "Row(%s)" % ", ".join(f"{k}={v!r}" for k, v in self.__dict__.items())


class DoOutputsTuple:
    """The outputs of a multi-output ParDo: index by tag, read as attributes, or unpack.

    With `dynamic` (Beam's `with_outputs()` without tags) a tag read for the first time gets a
    new output of the step, before the pipeline runs; what the DoFn emits to tags never read
    is dropped, as in Beam.
    """

    def __init__(self, main_tag: Optional[str], outputs: Dict[Optional[str], PCollection],
                 tags: Tuple[str, ...], dynamic: bool = False) -> None:
        self._main_tag = main_tag
        self._outputs = outputs
        self._tags = tags
        self._dynamic = dynamic

    def __getitem__(self, tag: Any) -> PCollection:
        if isinstance(tag, int):
            order = ([self._main_tag] if self._main_tag is not None else [None]) + list(self._tags)
            tag = order[tag]
        if tag not in self._outputs and self._dynamic and isinstance(tag, str):
            main = self._outputs[None]
            out = PCollection(main.pipeline, main.producer, tag, main.windowing, main.is_bounded)
            out.may_contain_retractions = main.may_contain_retractions
            self._outputs[tag] = main.producer.outputs[tag] = out
        if tag not in self._outputs:
            raise PipelineConstructionError(
                f"no output tagged {tag!r}; declared tags are {sorted(t for t in self._outputs if t)!r}"
                " (declare more with .with_outputs('tag', ...))")
        return self._outputs[tag]

    def __getattr__(self, tag: str) -> PCollection:
        if tag.startswith("_"):
            raise AttributeError(tag)
        return self[tag]

    def __iter__(self) -> Iterator[PCollection]:
        yield self._outputs[self._main_tag if self._main_tag is not None else None]
        for t in self._tags:
            yield self._outputs[t]

    def __len__(self) -> int:
        return 1 + len(self._tags)

    def __repr__(self) -> str:
        return f"<DoOutputsTuple main={self._main_tag!r} tags={list(self._tags)!r}>"


class AsSideInput:
    """Marks a PCollection passed to a ParDo as a side input, read per window of the main input."""

    def __init__(self, pcoll: PCollection) -> None:
        if not isinstance(pcoll, PCollection):
            raise InvalidArgumentError(
                f"{type(self).__name__} needs a PCollection, got {type(pcoll).__name__} {pcoll!r}")
        self.pvalue = pcoll

    def _view(self, values: list) -> Any:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.pvalue.label})"


class _NoDefault:
    """The 'no default value' marker; unpickles as the same object (side inputs cross processes)."""

    def __repr__(self) -> str:
        return "<no default>"

    def __reduce__(self) -> str:
        return "_NO_DEFAULT"


_NO_DEFAULT = _NoDefault()


class EmptySideInput:
    """What an `AsSingleton` view without a default reads in a window where its PCollection is empty.

    As in Beam, the DoFn (or CombineFn) gets an instance of this class in place of the value;
    test for it with `isinstance(value, pvalue.EmptySideInput)`, or give the view a
    `default_value`.
    """

    def __eq__(self, other: object) -> bool:
        return type(other) is EmptySideInput

    def __hash__(self) -> int:
        return hash(EmptySideInput)

    def __repr__(self) -> str:
        return "EmptySideInput()"


class AsSingleton(AsSideInput):
    """The side input's single element; `default_value`, else an `EmptySideInput`, when it is empty."""

    def __init__(self, pcoll: PCollection, default_value: Any = _NO_DEFAULT) -> None:
        super().__init__(pcoll)
        self.default_value = default_value

    def _view(self, values: list) -> Any:
        if len(values) == 1:
            return values[0]
        if not values:
            return EmptySideInput() if self.default_value is _NO_DEFAULT else self.default_value
        raise ValueError(
            f"side input AsSingleton({self.pvalue.label}) has {len(values)} elements in this window; "
            "a singleton needs exactly one (combine it first, or use AsList / AsIter)")


class AsIter(AsSideInput):
    """The side input's elements as an iterable."""

    def _view(self, values: list) -> Any:
        return _ReIterable(values)


class _ReIterable:
    __slots__ = ("_values",)

    def __init__(self, values: list) -> None:
        self._values = values

    def __iter__(self):
        return iter(self._values)

    def __repr__(self) -> str:
        return f"<side input iterable of {len(self._values)}>"


class AsList(AsSideInput):
    """The side input's elements as a list."""

    def _view(self, values: list) -> Any:
        return list(values)


class AsDict(AsSideInput):
    """The side input's (key, value) elements as a dict."""

    def _view(self, values: list) -> Any:
        try:
            return dict(values)
        except (TypeError, ValueError):
            raise ValueError(
                f"side input AsDict({self.pvalue.label}) needs (key, value) pairs; "
                "map its elements to 2-tuples first") from None


class AsMultiMap(AsSideInput):
    """The side input's (key, value) elements as a dict of key to list of values."""

    def _view(self, values: list) -> Any:
        out: Dict[Any, list] = {}
        for k, v in values:
            out.setdefault(k, []).append(v)
        return out
