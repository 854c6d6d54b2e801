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
    asserts it is DONE (or CANCELLED); without it, `run()` returns the result without waiting.
    Runs here are synchronous, as on Beam's direct runner, so they have finished (and raised any
    failure) by the time `run()` returns either way. As in Beam, `with TestPipeline() as p:`
    runs the pipeline when the block ends; `--not-use-test-runner-api` in argv sets
    `not_use_test_runner_api` (headrace never round-trips a pipeline through Beam's runner API,
    so it changes nothing); `TestPipeline.pytest_test_pipeline_options` (set by a pytest plugin)
    is the default of --test-pipeline-options. `display_data` is refused (headrace has no place
    to show it).
    """

    __test__ = False  # not a pytest test class
    #: The --test-pipeline-options value to use when argv has none (Beam's pytest hook sets it).
    pytest_test_pipeline_options: Optional[str] = None

    def __init__(self, runner: Any = None, options: Any = None, argv: Optional[List[str]] = None,
                 is_integration_test: bool = False, blocking: bool = True,
                 additional_pipeline_args: Optional[List[str]] = None, display_data: Any = None,
                 timeout: Optional[float] = None) -> None:
        if display_data is not None:
            raise UnsupportedArgumentError(
                "TestPipeline(display_data=...): headrace has no UI or job description to show "
                "display data in; drop the argument")
        self.is_integration_test = is_integration_test
        self.not_use_test_runner_api = False
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
        parser.add_argument("--not-use-test-runner-api", action="store_true", default=False)
        known, _ = parser.parse_known_args(sys.argv[1:] if argv is None else list(argv))
        options = known.test_pipeline_options or TestPipeline.pytest_test_pipeline_options
        if self.is_integration_test and not options:
            raise unittest.SkipTest("integration test skipped: no --test-pipeline-options given")
        self.not_use_test_runner_api = known.not_use_test_runner_api
        return shlex.split(options) if options else []

    @classmethod
    def get_options_list(cls, argv: Optional[List[str]] = None) -> List[str]:
        """The flags of --test-pipeline-options in `argv` (default sys.argv) as a list."""
        parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
        parser.add_argument("--test-pipeline-options", type=str, default=None)
        known, _ = parser.parse_known_args(sys.argv if argv is None else list(argv))
        options = known.test_pipeline_options or cls.pytest_test_pipeline_options
        return shlex.split(options) if options else []

    def get_pipeline_options(self) -> Any:
        """This test pipeline's PipelineOptions."""
        return self.options

    def get_full_options_as_args(self, **extra_opts: Any) -> List[str]:
        """The test's option flags followed by `--name=value` for each extra option (a True
        value gives `--name`; None, False and other empty values are left out)."""
        options = list(self.options_list)
        for name, value in extra_opts.items():
            if not value:
                continue
            options.append(f"--{name}" if value is True else f"--{name}={value}")
        return options

    def get_option(self, opt_name: str, bool_option: bool = False) -> Any:
        """The value of one flag among the test's options (None when absent; True / False for a
        `bool_option`)."""
        name = opt_name[2:] if opt_name.startswith("--") else opt_name
        parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
        if bool_option:
            parser.add_argument("--" + name, action="store_true", dest="value")
        else:
            parser.add_argument("--" + name, type=str, dest="value", default=None)
        known, _ = parser.parse_known_args(self.options_list)
        return known.value

    def run(self, test_runner_api: Any = True) -> PipelineResult:
        """Runs the pipeline; with `blocking`, waits for it and raises if it did not succeed."""
        result = super().run(False if self.not_use_test_runner_api else test_runner_api)
        if self.blocking:
            state = result.wait_until_finish(duration=self.timeout)
            if state not in (PipelineState.DONE, PipelineState.CANCELLED):
                raise AssertionError(f"the test pipeline ended in state {state}, not DONE")
        return result
