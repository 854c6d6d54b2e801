"""TestPipeline: a Pipeline for tests (runner chosen by options or HEADRACE_TEST_RUNNER)."""

from __future__ import annotations

import os
from typing import Any, List, Optional

from headrace.pipeline.pipeline import Pipeline


class TestPipeline(Pipeline):
    """A Pipeline that runs on exit, on the runner named by `runner`, options or $HEADRACE_TEST_RUNNER."""

    __test__ = False  # not a pytest test class

    def __init__(self, runner: Any = None, options: Any = None, argv: Optional[List[str]] = None,
                 is_integration_test: bool = False, blocking: bool = True, **kwargs: Any) -> None:
        if runner is None and options is None and not argv:
            runner = os.environ.get("HEADRACE_TEST_RUNNER") or None
        super().__init__(runner=runner, options=options, argv=argv)
