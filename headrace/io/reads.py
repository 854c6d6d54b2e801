"""What the message-queue reads share (Redis Streams, Kafka, JetStream, RabbitMQ).

Each connector's read DoFn defines `read(element, tracker, estimator, finalizer)`; the mixins
`BoundedRead` and `UnboundedRead` give it the `process` of a bounded read (the restriction
ends) or an unbounded one (`DoFn.unbounded_per_element`), with a `ReadProgressEstimator` and a
bundle finalizer. Put the mixin first: `class _ReadBounded(BoundedRead, _ReadStreams)`. Each
connector's readAll transform derives from `ReadAll`: the dead-letter choice
(`with_exception_handling`) and the read DoFn's two outputs.
"""

from __future__ import annotations

from typing import Any, Iterator, Optional, Tuple, TypeVar

from headrace.errors import InvalidArgumentError
from headrace.io.watermark_estimators import ReadProgressEstimator
from headrace.pipeline.dofn import DoFn
from headrace.pipeline.ptransform import PTransform

#: the tag of a read DoFn's output of the elements it could not read
DEAD_LETTER_TAG = "dead_letter"
_Self = TypeVar("_Self", bound="ReadAll")


class BoundedRead:
    """`process` of a read whose restrictions end."""

    def process(self, element: Any, tracker: Any = DoFn.RestrictionParam(),
                state: Any = DoFn.WatermarkEstimatorParam(ReadProgressEstimator.default_provider()),
                finalizer: Any = DoFn.BundleFinalizerParam) -> Iterator[Any]:
        """Reads `element`'s restriction (see the connector's `read`)."""
        return self.read(element, tracker, state, finalizer)  # type: ignore[attr-defined, no-any-return]


class UnboundedRead:
    """`process` of a read that goes on (unbounded per element)."""

    @DoFn.unbounded_per_element()
    def process(self, element: Any, tracker: Any = DoFn.RestrictionParam(),
                state: Any = DoFn.WatermarkEstimatorParam(ReadProgressEstimator.default_provider()),
                finalizer: Any = DoFn.BundleFinalizerParam) -> Iterator[Any]:
        """Reads `element`'s restriction (see the connector's `read`)."""
        return self.read(element, tracker, state, finalizer)  # type: ignore[attr-defined, no-any-return]


class ReadAll(PTransform):
    """What the message-queue readAll transforms share: a read DoFn with a main output and a
    dead-letter output (`DEAD_LETTER_TAG`), and the choice of returning both."""

    #: the tag of the read DoFn's main output (its connector's elements)
    main_tag = "elements"
    _tags: Optional[Tuple[str, str]] = None

    def with_exception_handling(self: _Self, main_tag: str = "good",
                                dead_letter_tag: str = "bad") -> _Self:
        """Makes the result (good, bad): the elements read, and the ones that could not be
        (malformed, a bad timestamp) as (the element with its raw data, (exception type, repr,
        traceback lines))."""
        if main_tag == dead_letter_tag:
            raise InvalidArgumentError(
                f"{type(self).__name__}.with_exception_handling: main_tag and dead_letter_tag are "
                f"both {main_tag!r}; give them different names")
        self._tags = (main_tag, dead_letter_tag)
        return self

    def _read(self, pcoll: Any, label: str, fn: Any) -> Tuple[Any, Any]:
        """(elements, dead letters) of the read DoFn `fn` applied to `pcoll` as `label`."""
        from headrace.transforms.core import ParDo
        result = pcoll | label >> ParDo(fn).with_outputs(DEAD_LETTER_TAG, main=self.main_tag)
        return result[self.main_tag], result[DEAD_LETTER_TAG]

    def _result(self, good: Any, bad: Any) -> Any:
        """The transform's result: `good`, or (good, bad) after `with_exception_handling`."""
        return good if self._tags is None else (good, bad)
