"""The only SDK-specific lines of the Beam-compatibility programs: Beam's or headrace's names.

COMPAT_SDK=beam imports Apache Beam, COMPAT_SDK=headrace imports headrace, under the module
paths a Beam program uses. A program imports its names from here (`from _sdk import beam,
window, ...`); everything else in it is SDK-neutral.
"""

import os
import sys

SDK = os.environ.get("COMPAT_SDK", "beam")

if SDK == "headrace":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    import headrace as beam
    from headrace import coders, typehints
    from headrace.io import ReadAllFromText, ReadFromText, ReadFromTextWithFilename, WriteToText
    from headrace.io.filesystem import CompressionTypes
    from headrace.io.filesystems import FileSystems
    from headrace.io.iobase import RestrictionProgress, RestrictionTracker, WatermarkEstimator
    from headrace.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
    from headrace.io import watermark_estimators
    from headrace.options.pipeline_options import PipelineOptions, StandardOptions
    from headrace.runners.runner import PipelineState
    from headrace.testing.test_stream import TestStream
    from headrace.testing import util as testing_util
    from headrace.testing.util import assert_that, equal_to
    from headrace.transforms import combiners, deduplicate, trigger, userstate, util, window
    from headrace.transforms.core import RestrictionProvider, WatermarkEstimatorProvider
    from headrace.transforms.ptransform import PTransform, ptransform_fn
    from headrace.transforms.userstate import (
        BagStateSpec, CombiningValueStateSpec, OrderedListStateSpec, ReadModifyWriteStateSpec,
        SetStateSpec, TimeDomain, TimerSpec, on_timer,
    )
    from headrace.utils.timestamp import MAX_TIMESTAMP, MIN_TIMESTAMP, Duration, Timestamp
    from headrace.utils.windowed_value import PaneInfoTiming
elif SDK == "beam":
    import apache_beam as beam
    from apache_beam import coders, typehints
    from apache_beam.io import ReadAllFromText, ReadFromText, ReadFromTextWithFilename, WriteToText
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.io.iobase import RestrictionProgress, RestrictionTracker, WatermarkEstimator
    from apache_beam.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
    from apache_beam.io import watermark_estimators
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
    from apache_beam.runners.runner import PipelineState
    from apache_beam.testing.test_stream import TestStream
    from apache_beam.testing import util as testing_util
    from apache_beam.testing.util import assert_that, equal_to
    from apache_beam.transforms import combiners, deduplicate, trigger, userstate, util, window
    from apache_beam.transforms.core import RestrictionProvider, WatermarkEstimatorProvider
    from apache_beam.transforms.ptransform import PTransform, ptransform_fn
    from apache_beam.transforms.userstate import (
        BagStateSpec, CombiningValueStateSpec, OrderedListStateSpec, ReadModifyWriteStateSpec,
        SetStateSpec, TimeDomain, TimerSpec, on_timer,
    )
    from apache_beam.utils.timestamp import MAX_TIMESTAMP, MIN_TIMESTAMP, Duration, Timestamp
    from apache_beam.utils.windowed_value import PaneInfoTiming
else:
    raise SystemExit(f"COMPAT_SDK must be 'beam' or 'headrace', got {SDK!r}")

__all__ = [
    "SDK", "beam", "coders", "typehints", "ReadAllFromText", "ReadFromText",
    "ReadFromTextWithFilename", "WriteToText", "CompressionTypes", "FileSystems",
    "PipelineOptions", "StandardOptions", "PipelineState", "TestStream", "testing_util", "assert_that",
    "equal_to", "combiners", "deduplicate", "trigger", "userstate", "util", "window", "PTransform",
    "ptransform_fn", "BagStateSpec", "CombiningValueStateSpec", "OrderedListStateSpec",
    "ReadModifyWriteStateSpec", "SetStateSpec", "TimeDomain", "TimerSpec", "on_timer",
    "MAX_TIMESTAMP", "MIN_TIMESTAMP", "Duration", "Timestamp", "PaneInfoTiming",
    "RestrictionProgress", "RestrictionTracker", "WatermarkEstimator", "OffsetRange",
    "OffsetRestrictionTracker", "watermark_estimators", "RestrictionProvider",
    "WatermarkEstimatorProvider",
]
