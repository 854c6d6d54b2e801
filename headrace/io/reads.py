"""The `process` methods the message-queue reads share (Redis Streams, Kafka, JetStream).

Each connector's read DoFn defines `read(element, tracker, estimator, finalizer)`; these
mixins give it the `process` of a bounded read (the restriction ends) or an unbounded one
(`DoFn.unbounded_per_element`), with a `ReadProgressEstimator` and a bundle finalizer.
Put the mixin first: `class _ReadBounded(BoundedRead, _ReadStreams)`.
"""

from __future__ import annotations

from typing import Any, Iterator

from headrace.io.watermark_estimators import ReadProgressEstimator
from headrace.pipeline.dofn import DoFn


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
