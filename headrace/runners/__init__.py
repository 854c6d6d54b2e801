"""Runners: the local reference runner and the Spark runner."""

from __future__ import annotations

from typing import Any

from headrace.errors import InvalidArgumentError

_ALIASES = {None: "LocalRunner", "DirectRunner": "LocalRunner", "LocalRunner": "LocalRunner",
            "local": "LocalRunner", "direct": "LocalRunner", "BundleBasedDirectRunner": "LocalRunner",
            "SwitchingDirectRunner": "LocalRunner", "SparkRunner": "SparkRunner",
            "spark": "SparkRunner"}


def create_runner(runner: Any) -> Any:
    """Returns a runner instance for a runner name, class or instance."""
    if runner is not None and not isinstance(runner, str):
        if isinstance(runner, type):
            return runner()
        return runner
    name = _ALIASES.get(runner)
    if name == "LocalRunner":
        from headrace.runners.local import LocalRunner
        return LocalRunner()
    if name == "SparkRunner":
        from headrace.runners.spark import SparkRunner
        return SparkRunner()
    raise InvalidArgumentError(
        f"unknown runner {runner!r}; use --runner=LocalRunner (alias DirectRunner) or --runner=SparkRunner")
