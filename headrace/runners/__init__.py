"""Runners: the local reference runner (`local/`) and the Spark runner (`spark/`), both built on
the runner kit (`kit/`), which holds every concept a runner needs once.

Runner names are looked up in `headrace.pipeline.runner_registry`, which imports a runner's
module only when its name is first used; `create_runner` and `register_runner` are the
registry's, re-exported here.
"""

from __future__ import annotations

from headrace.pipeline.runner_registry import (
    PipelineRunner, create_runner, known_runners, register_runner,
)

__all__ = ["PipelineRunner", "create_runner", "known_runners", "register_runner"]
