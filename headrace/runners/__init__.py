"""Runners: the local reference runner (`local/`) and the Spark runner (`spark/`), both built on
the runner kit (`kit/`), which holds every concept a runner needs once.

Runner names are looked up in `headrace.pipeline.runner_registry`, which imports a runner's
module only when its name is first used; `create_runner` and `register_runner` are the
registry's, re-exported here. `DirectRunner` (Beam's `apache_beam.runners.DirectRunner`) is the
local runner; `runner` is Beam's `apache_beam.runners.runner` module.
"""

from __future__ import annotations

from headrace.pipeline.runner_registry import (
    PipelineRunner, create_runner, known_runners, register_runner,
)
from headrace.runners import runner
from headrace.runners.local import LocalRunner

DirectRunner = LocalRunner

__all__ = ["DirectRunner", "LocalRunner", "PipelineRunner", "create_runner", "known_runners",
           "register_runner", "runner"]
