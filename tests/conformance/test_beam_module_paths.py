"""The module paths Beam programs import from, Beam's time values and API, and Beam's options
classes.

A table lists, per Beam module path, the names Beam code commonly imports from it and the
headrace object each must be (the top-level one, so `from apache_beam.x.y import Z` becomes
`from headrace.x.y import Z` with the same meaning). Timestamp values are Beam's constants
written out (its MIN/MAX_TIMESTAMP_MILLIS times 1000 and its global window's end).
"""

from __future__ import annotations

import datetime
import importlib
import logging
import time

import pytest

import headrace as beam
from headrace.errors import UnsupportedArgumentError
from headrace.io import filesystem as fs_mod
from headrace.io import filesystems as fss_mod
from headrace.testing.util import assert_that, equal_to

# Beam's portability constants: MIN_TIMESTAMP_MILLIS, MAX_TIMESTAMP_MILLIS,
# GLOBAL_WINDOW_MAX_TIMESTAMP_MILLIS.
BEAM_MIN_MILLIS = -9223372036854775
BEAM_MAX_MILLIS = 9223372036854775
BEAM_GLOBAL_WINDOW_MAX_MILLIS = 9223371950454775

W, T, C = beam.window, beam.transforms.trigger, beam.combiners

PATHS = {
    "headrace.transforms.ptransform": {"PTransform": beam.PTransform,
                                       "ptransform_fn": beam.ptransform_fn},
    "headrace.transforms.core": {
        n: getattr(beam, n) for n in (
            "DoFn", "ParDo", "Map", "MapTuple", "FlatMap", "FlatMapTuple", "Filter", "Create",
            "GroupByKey", "CombineFn", "CombineGlobally", "CombinePerKey", "CombineValues",
            "Flatten", "Partition", "WindowInto", "CoGroupByKey", "Keys", "Values", "KvSwap",
            "WithKeys", "PTransform")},
    "headrace.transforms.combiners": {
        n: getattr(C, n) for n in (
            "Count", "Mean", "Top", "ToList", "ToDict", "ToSet", "Latest", "CountCombineFn",
            "MeanCombineFn", "TopCombineFn", "ToListCombineFn", "ToDictCombineFn",
            "ToSetCombineFn", "LatestCombineFn", "SingleInputTupleCombineFn")},
    "headrace.transforms.window": {
        n: getattr(W, n) for n in (
            "FixedWindows", "SlidingWindows", "Sessions", "GlobalWindows", "GlobalWindow",
            "IntervalWindow", "BoundedWindow", "WindowFn", "NonMergingWindowFn",
            "TimestampCombiner", "TimestampedValue", "Timestamp", "Duration", "MIN_TIMESTAMP",
            "MAX_TIMESTAMP")},
    "headrace.transforms.trigger": {
        n: getattr(T, n) for n in (
            "AfterWatermark", "AfterCount", "AfterProcessingTime", "AfterAny", "AfterAll",
            "AfterEach", "Repeatedly", "OrFinally", "Always", "Never", "DefaultTrigger",
            "AccumulationMode")},
    "headrace.runners.runner": {"PipelineResult": beam.PipelineResult,
                                "PipelineState": beam.PipelineState},
    "headrace.runners": {"DirectRunner": beam.LocalRunner},
    "headrace.options.pipeline_options": {"PipelineOptions": beam.PipelineOptions},
    "headrace.utils.timestamp": {"Timestamp": W.Timestamp, "Duration": W.Duration,
                                 "MIN_TIMESTAMP": W.MIN_TIMESTAMP, "MAX_TIMESTAMP": W.MAX_TIMESTAMP},
    "headrace.utils.windowed_value": {"PaneInfo": beam.PaneInfo,
                                      "PaneInfoTiming": beam.PaneInfoTiming},
    "headrace.io.filesystems": {"FileSystems": beam.io.FileSystems},
    "headrace.io.filesystem": {n: getattr(beam.io, n) for n in (
        "CompressionTypes", "FileMetadata", "MatchResult", "BeamIOError")},
    "headrace.io.textio": {n: getattr(beam.io, n) for n in (
        "ReadFromText", "ReadFromTextWithFilename", "ReadAllFromText", "WriteToText")},
    "headrace.io": {"ReadFromText": beam.ReadFromText, "WriteToText": beam.WriteToText},
    # Beam's coder classes are in `apache_beam.coders.coders` (LengthPrefixCoder only there),
    # its registry in `apache_beam.coders.typecoders`
    "headrace.coders.coders": {n: getattr(beam.coders, n) for n in (
        "Coder", "VarIntCoder", "StrUtf8Coder", "TupleCoder", "FastPrimitivesCoder",
        "LengthPrefixCoder", "NullableCoder", "IterableCoder", "PickleCoder")},
    "headrace.coders.typecoders": {"registry": beam.coders.registry,
                                   "CoderRegistry": beam.coders.CoderRegistry},
}

# Names that exist at these paths without a top-level twin to compare with.
MORE = {
    "headrace.options.pipeline_options": [
        "StandardOptions", "SetupOptions", "GoogleCloudOptions", "WorkerOptions", "DebugOptions",
        "TypeOptions", "DirectOptions", "ProfilingOptions", "PortableOptions", "AzureOptions",
        "S3Options", "HadoopFileSystemOptions"],
    "headrace.utils.timestamp": ["TIME_GRANULARITY"],
    "headrace.utils.windowed_value": ["WindowedValue", "PANE_INFO_UNKNOWN"],
    "headrace.runners.runner": ["PipelineRunner"],
}


@pytest.mark.parametrize("path", sorted(PATHS))
def test_beam_module_path_gives_the_same_objects(path):
    module = importlib.import_module(path)
    for name, expected in PATHS[path].items():
        assert getattr(module, name) is expected, f"{path}.{name}"
    for name in MORE.get(path, []):
        assert getattr(module, name) is not None, f"{path}.{name}"
        assert name in getattr(module, "__all__", [name]), f"{path}.__all__ lacks {name}"


def test_beam_time_values():
    from headrace.utils.timestamp import MAX_TIMESTAMP, MIN_TIMESTAMP, TIME_GRANULARITY, Duration, Timestamp
    assert MIN_TIMESTAMP.micros == BEAM_MIN_MILLIS * 1000
    assert MAX_TIMESTAMP.micros == BEAM_MAX_MILLIS * 1000
    assert beam.window.GlobalWindow().max_timestamp() == Timestamp(
        micros=BEAM_GLOBAL_WINDOW_MAX_MILLIS * 1000)
    assert repr(MAX_TIMESTAMP) == "Timestamp(9223372036854.775000)"
    assert repr(MIN_TIMESTAMP) == "Timestamp(-9223372036854.775000)"
    assert TIME_GRANULARITY == Duration(micros=1)
    with pytest.raises(ValueError):
        Timestamp(micros=BEAM_MAX_MILLIS * 1000 + 1)


def test_timestamp_api_as_beam():
    from headrace.utils.timestamp import Duration, Timestamp
    t = Timestamp.from_rfc3339("2015-01-01T00:00:00Z")
    assert t.micros == 1420070400 * 10**6 and t == 1420070400
    assert Timestamp.from_rfc3339("2015-01-01T01:00:00+01:00") == t
    assert Timestamp(1420070400, 1).to_rfc3339() == "2015-01-01T00:00:00.000001Z"
    assert Timestamp.of(t) is t and Timestamp.of(12) == Timestamp(12) == Timestamp.of(12.0)
    assert Timestamp.of(datetime.datetime(2015, 1, 1, tzinfo=datetime.timezone.utc)) == t
    assert Timestamp(1.5).seconds() == 1 and Timestamp(-1.5).seconds() == -2
    assert isinstance(Timestamp(1.5).seconds(), int) and float(Timestamp(1.5)) == 1.5
    assert Timestamp(5).predecessor() == Timestamp(micros=4_999_999)
    assert Timestamp(5).successor() == Timestamp(micros=5_000_001)
    assert repr(Timestamp(-1.5)) == "Timestamp(-1.500000)" and repr(Timestamp(3)) == "Timestamp(3)"
    assert repr(Duration(-0.25)) == "Duration(-0.250000)"
    assert Timestamp(10) + Duration(5) == Timestamp(15) == Duration(5) + Timestamp(10)
    assert Timestamp(10) - Timestamp(4) == Duration(6)
    assert Timestamp(10) - 4 == Timestamp(6) and isinstance(Timestamp(10) - 4, Timestamp)
    assert Timestamp(10) % Duration(3) == Duration(1)
    assert Duration(3) * 2 == Duration(6) and 2 * Duration(3) == Duration(6)
    assert 10 - Duration(3) == Duration(7) and Duration(7) % 4 == Duration(3)
    naive = t.to_utc_datetime()
    assert naive == datetime.datetime(2015, 1, 1) and naive.tzinfo is None
    assert t.to_utc_datetime(has_tz=True) == datetime.datetime(2015, 1, 1, tzinfo=datetime.timezone.utc)
    before = time.time()
    now = Timestamp.now()
    assert before - 1 <= float(now) <= time.time() + 1


class _Stamp(beam.DoFn):
    def process(self, kv, ts=beam.DoFn.TimestampParam, w=beam.DoFn.WindowParam):
        yield (kv[0], ts.micros, w.max_timestamp().micros)


def test_end_of_global_window_is_beams_on_every_runner(make_pipeline):
    # A GroupByKey in the global window emits at the end of the window: Beam's value.
    from headrace.utils.timestamp import MIN_TIMESTAMP
    end = BEAM_GLOBAL_WINDOW_MAX_MILLIS * 1000
    with make_pipeline() as p:
        grouped = p | beam.Create([("a", 1), ("a", 2), ("b", 3)]) | beam.GroupByKey()
        assert_that(grouped | beam.ParDo(_Stamp()), equal_to([("a", end, end), ("b", end, end)]))
        created = p | "Times" >> beam.Create([1]) | beam.Map(
            lambda x, ts=beam.DoFn.TimestampParam: ts == MIN_TIMESTAMP)
        assert_that(created, equal_to([True]), label="created at MIN_TIMESTAMP")


def test_options_classes_parse_beams_flags():
    from headrace.options.pipeline_options import (
        DebugOptions, GoogleCloudOptions, PipelineOptions, PortableOptions, SetupOptions,
        StandardOptions, WorkerOptions,
    )
    opts = PipelineOptions([
        "--runner=DirectRunner", "--streaming", "--project=p", "--region=europe-west1",
        "--temp_location=gs://b/tmp", "--num_workers=3", "--machine_type=n1-standard-4",
        "--experiments=a,b", "--experiment=c=1", "--environment_type=LOOPBACK",
        "--labels=team=data", "--save_main_session"])
    assert opts.view_as(StandardOptions).streaming is True
    gc = opts.view_as(GoogleCloudOptions)
    assert (gc.project, gc.region, gc.temp_location, gc.labels) == (
        "p", "europe-west1", "gs://b/tmp", ["team=data"])
    assert opts.view_as(WorkerOptions).num_workers == 3
    assert opts.view_as(WorkerOptions).machine_type == "n1-standard-4"
    debug = opts.view_as(DebugOptions)
    assert debug.experiments == ["a", "b", "c=1"]
    assert debug.lookup_experiment("a") is True and debug.lookup_experiment("c") == "1"
    assert debug.lookup_experiment("zz", "no") == "no"
    debug.add_experiment("d")
    assert opts.view_as(DebugOptions).experiments == ["a", "b", "c=1", "d"]
    assert opts.view_as(PortableOptions).environment_type == "LOOPBACK"
    assert opts.view_as(SetupOptions).save_main_session is True


def test_ignored_options_are_named_in_one_warning_when_the_pipeline_runs(make_pipeline, caplog):
    p = make_pipeline(project="my-project", num_workers=5, experiments=["x"],
                      sdk_location="container")
    assert_that(p | beam.Create([1, 2]) | beam.Map(lambda x: x * 10), equal_to([10, 20]))
    with caplog.at_level(logging.WARNING, logger="headrace.options.pipeline_options"):
        p.run()
    warnings = [r.getMessage() for r in caplog.records if "ignores these pipeline options" in r.getMessage()]
    assert len(warnings) == 1
    for flag in ("--project=my-project", "--num_workers=5", "--experiments=['x']",
                 "--sdk_location=container"):
        assert flag in warnings[0]
    assert "--region" not in warnings[0]  # left at its default: not named


def test_extra_packages_are_refused_with_the_way_out(make_pipeline):
    p = make_pipeline(extra_packages=["dist/pkg.tar.gz"])
    p | beam.Create([1])
    with pytest.raises(UnsupportedArgumentError, match="extra_packages.*PYSPARK_PYTHON"):
        p.run()


def test_pipeline_state_is_terminal():
    from headrace.runners.runner import PipelineState
    assert PipelineState.is_terminal(PipelineState.DONE)
    assert PipelineState.is_terminal(PipelineState.CANCELLED)
    assert not PipelineState.is_terminal(PipelineState.RUNNING)
    assert {s.value for s in PipelineState} >= {"UNKNOWN", "STARTING", "STOPPED", "RUNNING", "DONE",
                                                "FAILED", "CANCELLED", "UPDATED", "DRAINING",
                                                "DRAINED", "PENDING", "CANCELLING",
                                                "RESOURCE_CLEANING_UP", "UNRECOGNIZED"}


def test_io_modules_are_the_public_ones():
    assert fss_mod.FileSystems.get_filesystem("/tmp") is not None
    assert fs_mod.CompressionTypes.GZIP == "gzip" and fs_mod.CompressionTypes.AUTO == "auto"
    assert fs_mod.CompressionTypes.is_valid_compression_type("bzip2")
    assert not fs_mod.CompressionTypes.is_valid_compression_type("snappy")
