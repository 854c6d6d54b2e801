"""The runner registry: names and aliases, lazily imported factories, classes and instances."""

from __future__ import annotations

import pytest

import headrace as beam
from headrace.errors import InvalidArgumentError
from headrace.pipeline import runner_registry
from headrace.pipeline.pipeline import PipelineResult, PipelineState
from headrace.pipeline.runner_registry import create_runner, known_runners, register_runner, runner_factory
from headrace.runners.local import LocalRunner


@pytest.fixture
def registry():
    """Restores the registry after a test that registers runners."""
    saved = (dict(runner_registry._FACTORIES), dict(runner_registry._ALIASES),
             dict(runner_registry._NAMES))
    yield
    for table, old in zip((runner_registry._FACTORIES, runner_registry._ALIASES,
                           runner_registry._NAMES), saved):
        table.clear()
        table.update(old)


class RecordingRunner:
    """Runs nothing; records the pipelines it was given."""

    runs: list = []

    def run_pipeline(self, pipeline, options):
        RecordingRunner.runs.append(pipeline)
        return PipelineResult(PipelineState.DONE)


@pytest.mark.parametrize("name", [None, "LocalRunner", "DirectRunner", "local", "direct",
                                  "BundleBasedDirectRunner", "SwitchingDirectRunner"])
def test_local_runner_names(name):
    assert isinstance(create_runner(name), LocalRunner)


def test_built_in_runners_are_registered_by_module_path():
    from headrace.runners.spark.runner import SparkRunner
    assert runner_registry._FACTORIES["LocalRunner"] == "headrace.runners.local.runner:LocalRunner"
    assert runner_factory("spark") is SparkRunner
    assert runner_factory("SparkRunner") is SparkRunner
    assert known_runners()["SparkRunner"] == ["spark"]


def test_headrace_runners_create_runner_is_the_registry_s():
    from headrace import runners
    assert runners.create_runner is create_runner
    assert runners.register_runner is register_runner


def test_unknown_runner_names_the_known_ones():
    with pytest.raises(InvalidArgumentError) as info:
        create_runner("NoSuchRunner")
    message = str(info.value)
    assert "'NoSuchRunner'" in message
    assert "LocalRunner (aliases DirectRunner" in message and "SparkRunner (alias spark)" in message


def test_runner_class_and_instance_pass_through():
    runner = RecordingRunner()
    assert create_runner(runner) is runner
    assert isinstance(create_runner(RecordingRunner), RecordingRunner)
    p = beam.Pipeline(runner=runner)
    p | beam.Create([1])
    assert p.run().state == PipelineState.DONE
    assert RecordingRunner.runs[-1] is p


@pytest.mark.parametrize("factory", [RecordingRunner, f"{__name__}:RecordingRunner"])
def test_registered_runner_runs_pipelines_by_name(registry, factory):
    register_runner("Recording", factory, aliases=("rec",))
    for name in ("Recording", "rec"):
        p = beam.Pipeline(argv=[f"--runner={name}"])
        p | beam.Create([1])
        assert p.run().state == PipelineState.DONE
        assert RecordingRunner.runs[-1] is p
    assert known_runners()["Recording"] == ["rec"]


def test_registering_again_replaces_the_factory_and_aliases(registry):
    register_runner("Recording", RecordingRunner, aliases=("rec",))
    register_runner("Recording", LocalRunner, aliases=("rec2",))
    assert isinstance(create_runner("rec2"), LocalRunner)
    with pytest.raises(InvalidArgumentError, match="unknown runner 'rec'"):
        create_runner("rec")


@pytest.mark.parametrize("name, factory, aliases, match", [
    ("Mine", RecordingRunner, ("DirectRunner",), "already belongs to the runner 'LocalRunner'"),
    ("spark", RecordingRunner, (), "already belongs to the runner 'SparkRunner'"),
    ("Mine", "headrace.runners.local.runner.LocalRunner", (), "package.module:attribute"),
    ("Mine", 42, (), "must be a runner class"),
    ("", RecordingRunner, (), "non-empty strings"),
])
def test_register_runner_refuses(registry, name, factory, aliases, match):
    with pytest.raises(InvalidArgumentError, match=match):
        register_runner(name, factory, aliases=aliases)
    assert "Mine" not in known_runners()


def test_a_single_alias_may_be_a_string(registry):
    register_runner("Recording", RecordingRunner, aliases="rec")
    assert known_runners()["Recording"] == ["rec"]
