"""Shared fixtures.

Every semantic test (tests/conformance/) takes the `runner` fixture, directly or through
`make_pipeline`, so it runs once per runner listed in RUNNERS. To run the suite on another
runner, add its name here (e.g. "SparkRunner"): the same tests then check that runner
against the same, independently computed expectations.
"""

from __future__ import annotations

import pytest

import headrace as beam
from headrace.options.pipeline_options import PipelineOptions
from tests._support import Journal, Once

RUNNERS = ["LocalRunner"]


@pytest.fixture(params=RUNNERS)
def runner(request):
    """The name of the runner under test."""
    return request.param


@pytest.fixture
def make_pipeline(runner):
    """`make_pipeline(**opts)` builds a Pipeline on the runner under test, e.g. bundle_size=2."""
    return lambda **opts: beam.Pipeline(runner=runner, options=PipelineOptions(**opts))


@pytest.fixture
def pipeline_factory(make_pipeline):
    """Alias of `make_pipeline`."""
    return make_pipeline


@pytest.fixture
def journal(tmp_path):
    """An event log DoFns can append to from any process."""
    return Journal(tmp_path / "journal.jsonl")


@pytest.fixture
def once(tmp_path):
    """`once.first(name)` is True the first time only (used to fail an attempt once)."""
    return Once(tmp_path / "once")
