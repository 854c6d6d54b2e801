"""PipelineOptions in Beam's style: flags, keyword options, typed views, runner selection."""

from __future__ import annotations

import pytest

import headrace as beam
from headrace.errors import InvalidArgumentError, PipelineExecutionError
from headrace.options.pipeline_options import (
    GoogleCloudOptions, LocalRunnerOptions, PipelineOptions, SetupOptions, StandardOptions,
)
from headrace.runners import create_runner
from headrace.runners.local import LocalRunner
from headrace.testing.util import assert_that, equal_to
from tests._support import BundleSizes, Journal, Once


def test_direct_runner_flag_maps_to_local_runner():
    opts = PipelineOptions(["--runner=DirectRunner"])
    assert opts.view_as(StandardOptions).runner == "DirectRunner"
    assert isinstance(create_runner("DirectRunner"), LocalRunner)
    assert isinstance(create_runner(None), LocalRunner)  # the default runner
    p = beam.Pipeline(options=opts)
    assert_that(p | beam.Create([1, 2]) | beam.Map(lambda x: -x), equal_to([-1, -2]))
    result = p.run()
    assert result.wait_until_finish() == beam.PipelineState.DONE
    assert result.state == beam.PipelineState.DONE


def test_unknown_runner_raises():
    p = beam.Pipeline(runner="NoSuchRunner")
    p | beam.Create([1])
    with pytest.raises(InvalidArgumentError):
        p.run()


def test_pipeline_from_argv(runner_flags, tmp_path):
    journal = Journal(tmp_path / "j.jsonl")

    p = beam.Pipeline(argv=[*runner_flags, "--bundle_size=2", "--max_bundle_attempts=5"])
    assert p.options.view_as(StandardOptions).runner == runner_flags[0].split("=", 1)[1]
    local = p.options.view_as(LocalRunnerOptions)
    assert (local.bundle_size, local.max_bundle_attempts) == (2, 5)
    assert_that(p | beam.Create(list(range(7))) | beam.ParDo(BundleSizes(journal)), equal_to(list(range(7))))
    p.run()
    sizes = [e[0] for e in journal.read()]
    assert sum(sizes) == 7 and max(sizes) <= 2


def test_argv_max_bundle_attempts_is_honoured(runner_flags, tmp_path):
    once = Once(tmp_path)

    def flaky(x, once=once):
        if once.first("x"):
            raise RuntimeError("first attempt fails")
        return x

    ok = beam.Pipeline(argv=[*runner_flags, "--max_bundle_attempts=2"])
    assert_that(ok | beam.Create([1]) | beam.Map(flaky), equal_to([1]))
    ok.run()

    once2 = Once(tmp_path / "again")
    failing = beam.Pipeline(argv=[*runner_flags, "--max_bundle_attempts=1"])
    failing | beam.Create([1]) | beam.Map(flaky, once=once2)
    with pytest.raises(PipelineExecutionError):
        failing.run()


def test_view_as_standard_options():
    opts = PipelineOptions(["--runner=LocalRunner", "--streaming"])
    std = opts.view_as(StandardOptions)
    assert isinstance(std, StandardOptions)
    assert std.runner == "LocalRunner"
    assert std.streaming is True
    assert PipelineOptions([]).view_as(StandardOptions).streaming is False
    assert PipelineOptions([]).view_as(StandardOptions).runner is None


def test_views_share_values():
    opts = PipelineOptions(["--runner=DirectRunner"])
    opts.view_as(SetupOptions).save_main_session = True
    assert opts.view_as(SetupOptions).save_main_session is True
    assert opts.get_all_options()["save_main_session"] is True
    opts.view_as(StandardOptions).runner = "LocalRunner"
    assert opts.view_as(StandardOptions).runner == "LocalRunner"


def test_keyword_options():
    opts = PipelineOptions(bundle_size=2, max_bundle_attempts=3)
    local = opts.view_as(LocalRunnerOptions)
    assert (local.bundle_size, local.max_bundle_attempts) == (2, 3)
    assert PipelineOptions.from_dictionary({"bundle_size": 9}).view_as(LocalRunnerOptions).bundle_size == 9


def test_unknown_keyword_option_raises():
    with pytest.raises(InvalidArgumentError):
        PipelineOptions(no_such_option=1)


def test_beam_cloud_flags_are_accepted_and_unknown_flags_ignored():
    opts = PipelineOptions(["--project=my-project", "--region=europe-west1",
                            "--temp_location=gs://bucket/tmp", "--some_unknown_flag=1"])
    gcp = opts.view_as(GoogleCloudOptions)
    assert (gcp.project, gcp.region, gcp.temp_location) == ("my-project", "europe-west1",
                                                            "gs://bucket/tmp")


def test_flags_must_be_a_list():
    with pytest.raises(InvalidArgumentError):
        PipelineOptions("--runner=DirectRunner")


def test_pipeline_options_must_be_pipeline_options():
    with pytest.raises(InvalidArgumentError):
        beam.Pipeline(options={"runner": "DirectRunner"})


def test_get_all_options_drop_default_and_current_only():
    opts = PipelineOptions(["--runner=DirectRunner", "--bundle_size=5"], max_bundle_attempts=4)
    everything = opts.get_all_options()
    assert everything["runner"] == "DirectRunner" and everything["bundle_size"] == 5
    changed = opts.get_all_options(drop_default=True)
    defaults = PipelineOptions([]).get_all_options()
    assert changed == {k: v for k, v in everything.items() if v != defaults[k]}
    assert set(changed) == {"runner", "bundle_size"}  # max_bundle_attempts=4 is the default
    local = opts.view_as(LocalRunnerOptions).get_all_options(current_only=True)
    assert local == {"bundle_size": 5, "max_bundle_attempts": 4, "sdf_test_split_probability": 0.0,
                     "sdf_test_split_seed": 0}


def test_get_all_options_sees_values_set_after_parsing():
    opts = PipelineOptions(["--bundle_size=5"])
    opts.view_as(LocalRunnerOptions).bundle_size = 8
    assert opts.get_all_options()["bundle_size"] == 8
    assert opts.get_all_options(drop_default=True) == {"bundle_size": 8}


def test_get_all_options_retain_unknown_options_and_extra_args():
    flags = ["--bundle_size=3", "--my_flag=x", "--my_switch", "--my_pair", "v", "-q"]
    opts = PipelineOptions(flags)
    assert "my_flag" not in opts.get_all_options()
    kept = opts.get_all_options(retain_unknown_options=True)
    assert (kept["my_flag"], kept["my_switch"], kept["my_pair"]) == ("x", True, "v")
    assert kept["bundle_size"] == 3

    def extra(parser):
        parser.add_argument("--my_flag", type=str, default="none")
        parser.add_argument("--other", type=int, default=7)

    with_extra = opts.get_all_options(add_extra_args_fn=extra)
    assert (with_extra["my_flag"], with_extra["other"]) == ("x", 7)


def test_get_all_options_display_warnings_suggests_a_known_flag(caplog):
    opts = PipelineOptions(["--bundle_sise=3"])
    with caplog.at_level("WARNING"):
        opts.get_all_options(display_warnings=True)
    assert "--bundle_sise=3" in caplog.text and "--bundle_size" in caplog.text


def test_get_all_options_refuses_unknown_arguments():
    with pytest.raises(TypeError, match="no_such_argument"):
        PipelineOptions([]).get_all_options(no_such_argument=True)
