"""TestPipeline: Beam's Pipeline for tests (options from --test-pipeline-options; runner also from env)."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import unittest
from typing import Any, List, Optional

from headrace.errors import UnsupportedArgumentError
from headrace.pipeline.pipeline import Pipeline, PipelineResult, PipelineState


class TestPipeline(Pipeline):
    """A Pipeline for tests, built as Beam's TestPipeline is.

    Its options come from `--test-pipeline-options="--flag=value ..."` in `argv` (default
    `sys.argv`) followed by `additional_pipeline_args`, unless `options` is given; the runner
    from `runner`, those options, or $HEADRACE_TEST_RUNNER. An integration test
    (`is_integration_test=True`) is skipped when no --test-pipeline-options are given. With
    `blocking` (the default) `run()` also waits for the result (at most `timeout` seconds) and
    asserts it is DONE; without it, `run()` returns the result without waiting. Runs here are
    synchronous, as on Beam's direct runner, so they have finished (and raised any failure) by
    the time `run()` returns either way. `display_data` is refused (headrace has no place to
    show it).
    """

    __test__ = False  # not a pytest test class

    def __init__(self, runner: Any = None, options: Any = None, argv: Optional[List[str]] = None,
                 is_integration_test: bool = False, blocking: bool = True,
                 additional_pipeline_args: Optional[List[str]] = None, display_data: Any = None,
                 timeout: Optional[float] = None) -> None:
        if display_data is not None:
            raise UnsupportedArgumentError(
                "TestPipeline(display_data=...): headrace has no UI or job description to show "
                "display data in; drop the argument")
        self.is_integration_test = is_integration_test
        self.blocking = blocking
        self.timeout = timeout
        self.options_list = self._test_pipeline_options(argv) + list(additional_pipeline_args or [])
        if runner is None and options is None and not any(
                a.startswith("--runner") for a in self.options_list):
            runner = os.environ.get("HEADRACE_TEST_RUNNER") or None
        super().__init__(runner=runner, options=options, argv=self.options_list)

    def _test_pipeline_options(self, argv: Optional[List[str]]) -> List[str]:
        parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
        parser.add_argument("--test-pipeline-options", type=str, default=None)
        known, _ = parser.parse_known_args(sys.argv[1:] if argv is None else list(argv))
        if self.is_integration_test and not known.test_pipeline_options:
            raise unittest.SkipTest("integration test skipped: no --test-pipeline-options given")
        return shlex.split(known.test_pipeline_options) if known.test_pipeline_options else []

    def get_pipeline_options(self) -> Any:
        """This test pipeline's PipelineOptions."""
        return self.options

    def run(self, test_runner_api: Any = True) -> PipelineResult:
        """Runs the pipeline; with `blocking`, waits for it and raises if it did not succeed."""
        result = super().run(test_runner_api)
        if self.blocking:
            state = result.wait_until_finish(duration=self.timeout)
            if state != PipelineState.DONE:
                raise AssertionError(f"the test pipeline ended in state {state}, not DONE")
        return result
