"""Runners as the graph sees them: the PipelineRunner protocol and the registry of runner names.

`Pipeline.run()` turns its `runner` (a name such as "DirectRunner", a runner class or a runner
instance) into a runner here and calls `run_pipeline(pipeline, options)` on it. The graph does
not import the runners: a name maps to a factory, either a callable or the path of one,
"package.module:attribute", which is imported the first time the name is used (as a
setuptools entry point is). So `headrace.pipeline` sits below `headrace.runners` in the import
graph, and a runner defined elsewhere joins with `register_runner`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Optional, Protocol, Union

from headrace.errors import InvalidArgumentError

if TYPE_CHECKING:
    from headrace.pipeline.pipeline import Pipeline, PipelineResult

DEFAULT_RUNNER = "LocalRunner"


class PipelineRunner(Protocol):
    """What `Pipeline.run()` needs from a runner: run the pipeline to completion, return its result."""

    def run_pipeline(self, pipeline: "Pipeline", options: Any) -> "PipelineResult":
        """Executes `pipeline` with `options` (a PipelineOptions) and returns its PipelineResult."""
        ...


RunnerFactory = Union[str, Callable[[], PipelineRunner]]

_FACTORIES: Dict[str, RunnerFactory] = {}
_ALIASES: Dict[str, List[str]] = {}
_NAMES: Dict[str, str] = {}  # a name or alias -> the runner's name


def register_runner(name: str, factory: RunnerFactory, aliases: Iterable[str] = ()) -> None:
    """Makes `name` (and each of `aliases`) create a runner with `factory`.

    `factory` is a callable with no arguments returning a runner (usually the runner class) or
    a string "package.module:attribute" naming one, imported when the name is first used.
    Registering a name again replaces its factory and aliases; a name or alias that already
    belongs to another runner is refused.
    """
    aliases = [a for a in ((aliases,) if isinstance(aliases, str) else aliases) if a != name]
    for key in (name, *aliases):
        if not isinstance(key, str) or not key:
            raise InvalidArgumentError(f"register_runner: runner names are non-empty strings, got {key!r}")
        owner = _NAMES.get(key)
        if owner is not None and owner != name:
            raise InvalidArgumentError(
                f"register_runner({name!r}): the name {key!r} already belongs to the runner {owner!r}")
    if isinstance(factory, str):
        if factory.count(":") != 1 or not all(factory.split(":")):
            raise InvalidArgumentError(
                f"register_runner({name!r}): a factory path is 'package.module:attribute', "
                f"got {factory!r}")
    elif not callable(factory):
        raise InvalidArgumentError(
            f"register_runner({name!r}): the factory must be a runner class, a callable returning "
            f"a runner or a 'package.module:attribute' path, got {factory!r}")
    for old in _ALIASES.pop(name, ()):
        _NAMES.pop(old, None)
    _FACTORIES[name] = factory
    _ALIASES[name] = aliases
    for key in (name, *aliases):
        _NAMES[key] = name


def known_runners() -> Dict[str, List[str]]:
    """The registered runner names, each with its aliases."""
    return {name: list(_ALIASES[name]) for name in _FACTORIES}


def _describe_known() -> str:
    parts = []
    for name, aliases in known_runners().items():
        parts.append(f"{name} (alias{'es' if len(aliases) > 1 else ''} {', '.join(aliases)})"
                     if aliases else name)
    return "; ".join(parts)


def runner_factory(name: Optional[str]) -> Callable[[], PipelineRunner]:
    """The factory registered for the runner name or alias `name` (None: the default runner)."""
    key = DEFAULT_RUNNER if name is None else name
    canonical = _NAMES.get(key) if isinstance(key, str) else None
    if canonical is None:
        raise InvalidArgumentError(
            f"unknown runner {name!r}; the known runners are {_describe_known()}: pass one with "
            "--runner=NAME (or Pipeline(runner=...)), or add one with "
            "headrace.runners.register_runner(name, factory)")
    factory = _FACTORIES[canonical]
    if isinstance(factory, str):
        module_name, attribute = factory.split(":")
        factory = getattr(importlib.import_module(module_name), attribute)
    return factory


def create_runner(runner: Any = None) -> PipelineRunner:
    """Returns a runner for a registered name or alias (None: the default), a runner class or instance."""
    if runner is not None and not isinstance(runner, str):
        if isinstance(runner, type):
            return runner()
        return runner
    return runner_factory(runner)()


register_runner("LocalRunner", "headrace.runners.local.runner:LocalRunner",
                aliases=("DirectRunner", "local", "direct", "BundleBasedDirectRunner",
                         "SwitchingDirectRunner"))
register_runner("SparkRunner", "headrace.runners.spark.runner:SparkRunner", aliases=("spark",))
