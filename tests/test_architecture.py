"""Layering rules: `headrace.model` is the engine-agnostic core and imports nothing above it.

The model (time, windows, triggers, the per-key reduce core, combining, coders) may import
only the standard library, the few third-party packages in ALLOWED_THIRD_PARTY,
`headrace.errors` and `headrace.model` itself: not Spark, py4j, pandas, numpy or pyarrow, and
none of headrace's other packages (the top-level surface, the pipeline graph, the runners,
the transforms, the connectors, metrics, options, testing), so that every runner can drive
the same core. Every module under `headrace/model/` is checked, subpackages included.
Imports are read with `ast`, so imports inside functions, under `if TYPE_CHECKING:`,
relative imports and `importlib.import_module("...")` calls all count.
"""

from __future__ import annotations

import ast
import pathlib
import sys
import textwrap
from typing import Dict, List, Optional, Set, Tuple

import pytest

import headrace

PACKAGE_DIR = pathlib.Path(headrace.__file__).resolve().parent
MODEL_DIR = PACKAGE_DIR / "model"

#: Engines and columnar libraries: named so that a violation says what it is.
ENGINE_PACKAGES = ("pyspark", "py4j", "pandas", "numpy", "pyarrow")
#: Third-party packages the model may import, each with the reason.
ALLOWED_THIRD_PARTY = {
    "cloudpickle": "value serialisation (model/coders.py dumps / loads)",
}
#: The headrace modules the model may import: itself and the errors every layer raises.
ALLOWED_HEADRACE = ("headrace.model", "headrace.errors")


def module_name(path: pathlib.Path) -> str:
    """The dotted name of a module file; a package's `__init__.py` keeps `.__init__`.

    (So that, for relative imports, the module's package is everything before the last dot.)
    """
    return ".".join(path.resolve().relative_to(PACKAGE_DIR.parent).with_suffix("").parts)


def imported_modules(source: str, module: str) -> List[Tuple[int, str]]:
    """(line, absolute module name) of every import in `source`, the code of `module`."""
    package = module.rsplit(".", 1)[0]
    found: List[Tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                name = f"{base}.{node.module}" if node.module else base
            else:
                name = node.module or ""
            names = [f"{name}.{alias.name}" for alias in node.names if alias.name != "*"]
            # `from headrace import errors` imports the submodule `headrace.errors`: judge it by
            # the names it imports, not by the top-level package they come from.
            if name != "headrace" or not names:
                found.append((node.lineno, name))
            found.extend((node.lineno, n) for n in names)
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and ((isinstance(node.func, ast.Name) and node.func.id == "__import__")
                   or (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module"))):
            found.append((node.lineno, node.args[0].value))
    return found


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def why_forbidden(name: str) -> str:
    """Why the model may not import `name`, or '' when it may."""
    top = name.split(".")[0]
    if top == "headrace":
        if any(_within(name, allowed) for allowed in ALLOWED_HEADRACE):
            return ""
        return "headrace.model may import only headrace.model and headrace.errors"
    if top in ENGINE_PACKAGES:
        return f"{top} is an engine / columnar library; the model is engine-agnostic"
    if top in sys.stdlib_module_names or top in ALLOWED_THIRD_PARTY:
        return ""
    return (f"{top} is neither the standard library nor in ALLOWED_THIRD_PARTY "
            "(add it there, with the reason, only if the model itself needs it)")


def violations(source: str, module: str) -> List[str]:
    """The forbidden imports in `source`, as 'module:line imports name (why)'."""
    out = []
    for line, name in imported_modules(source, module):
        why = why_forbidden(name)
        if why:
            out.append(f"{module}:{line} imports {name} ({why})")
    return out


MODEL_FILES = sorted(MODEL_DIR.rglob("*.py"))


def _file_id(path: pathlib.Path) -> str:
    return path.relative_to(MODEL_DIR).as_posix()


def test_model_package_has_modules():
    names = {_file_id(p) for p in MODEL_FILES}
    assert {"__init__.py", "reduce.py", "window.py", "time.py", "trigger.py", "strategy.py",
            "combine.py", "coders.py", "triggers/__init__.py", "triggers/algebra.py",
            "triggers/sugar.py"} <= names


@pytest.mark.parametrize("path", MODEL_FILES, ids=_file_id)
def test_model_module_imports_nothing_above_the_model(path):
    bad = violations(path.read_text(encoding="utf-8"), module_name(path))
    assert not bad, ("headrace.model must stay engine-agnostic (see docs/architecture.md); move the "
                     "code that needs these into runners/ or pipeline/: " + "; ".join(bad))


def test_module_names_of_model_files():
    assert module_name(MODEL_DIR / "trigger.py") == "headrace.model.trigger"
    assert module_name(MODEL_DIR / "triggers" / "algebra.py") == "headrace.model.triggers.algebra"
    assert module_name(MODEL_DIR / "triggers" / "__init__.py") == "headrace.model.triggers.__init__"


def test_a_model_module_importing_numpy_fails_the_check():
    path = MODEL_DIR / "triggers" / "algebra.py"
    source = path.read_text(encoding="utf-8")
    assert not violations(source, module_name(path))
    bad = violations(source + "\nimport numpy as np\n", module_name(path))
    assert len(bad) == 1 and "imports numpy (numpy is an engine" in bad[0]


@pytest.mark.parametrize("source", [
    "import pyspark.sql",
    "from pandas import DataFrame",
    "import numpy",
    "import numpy as np",
    "from numpy.typing import NDArray",
    "import pyarrow.compute as pc",
    "from py4j.java_gateway import JavaGateway",
    "import redis",
    "def f():\n    from headrace.runners.local import runner",
    "from ..pipeline.pvalue import PCollection",
    "from .. import transforms",
    "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from headrace.io import textio",
    "import importlib\nimportlib.import_module('headrace.runners.kit.stage')",
    "__import__('numpy')",
    "import headrace",
    "from headrace import Pipeline",
    "from headrace import *",
    "from headrace.metrics import Metrics",
    "from headrace.metrics.metric import MetricsContainer",
    "from headrace.options.pipeline_options import PipelineOptions",
    "from headrace.testing import TestStream",
    "from headrace.utils import timestamp",
    "from headrace.iofoo import x",
    "from headrace.modelling import x",
    "from headrace.errorsx import y",
])
def test_checker_catches_forbidden_imports(source):
    assert violations(source, "headrace.model.example")


@pytest.mark.parametrize("source, module", [
    ("from ...metrics import Metrics", "headrace.model.triggers.example"),
    ("from ... import options", "headrace.model.triggers.example"),
    ("from ... import testing", "headrace.model.triggers.__init__"),
    ("import numpy", "headrace.model.triggers.__init__"),
])
def test_checker_catches_forbidden_imports_in_subpackages(source, module):
    assert violations(source, module)


@pytest.mark.parametrize("source", [
    "from headrace.model.time import Timestamp",
    "from .window import Sessions",
    "from headrace.errors import InvalidArgumentError",
    "from headrace import errors",
    "from headrace.model import trigger",
    "import headrace.model.time",
    "import cloudpickle",
    "import numbers",
    "from __future__ import annotations",
    "from typing import TYPE_CHECKING",
])
def test_checker_allows_the_model_and_plain_dependencies(source):
    assert not violations(source, "headrace.model.example")


# ---- no import cycle between the packages ------------------------------------------------------
#
# Every import in every module of `headrace` (top-level, inside functions, under
# TYPE_CHECKING, relative, `importlib.import_module("...")` with a constant) is an edge from
# the module's unit to the unit of the module it names. A unit is a subpackage
# (`headrace.pipeline` for everything under pipeline/), a top-level module (`headrace.errors`)
# or the root package `headrace` (its __init__, which imports the whole public surface).
# Registering a runner by a string path ("headrace.runners.local.runner:LocalRunner") is not
# an import: it is resolved when the runner is asked for, which is how the graph stays below
# the runners.

LAYERED_PACKAGES = ("headrace.model", "headrace.pipeline", "headrace.transforms", "headrace.io",
                    "headrace.testing", "headrace.runners")


def module_names(package_dir: pathlib.Path = PACKAGE_DIR) -> Dict[str, pathlib.Path]:
    """Every module of the package by dotted name (a package's __init__ as `pkg.__init__`)."""
    root = package_dir.parent
    return {".".join(p.relative_to(root).with_suffix("").parts): p for p in package_dir.rglob("*.py")}


def unit_of(module: str) -> str:
    """The unit a module belongs to: `headrace.X` for anything under headrace/X, or `headrace`."""
    parts = module.split(".")
    return "headrace" if len(parts) < 2 or parts[1] == "__init__" else ".".join(parts[:2])


def resolve(name: str, modules: Set[str]) -> Optional[str]:
    """The module of `headrace` an imported name refers to (its longest prefix that is one)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules or candidate + ".__init__" in modules:
            return candidate
        parts.pop()
    return None


def unit_graph(sources: Dict[str, str]) -> Dict[str, Dict[str, List[str]]]:
    """{unit: {imported unit: ['module:line imports name', ...]}} for modules given as {name: code}."""
    modules = {m[: -len(".__init__")] if m.endswith(".__init__") else m for m in sources}
    graph: Dict[str, Dict[str, List[str]]] = {}
    for module, source in sorted(sources.items()):
        here = unit_of(module)
        edges = graph.setdefault(here, {})
        for line, name in imported_modules(source, module):
            target = resolve(name, modules)
            if target is not None and unit_of(target) != here:
                edges.setdefault(unit_of(target), []).append(f"{module}:{line} imports {name}")
    return graph


def find_cycle(graph: Dict[str, Dict[str, List[str]]]) -> Optional[List[str]]:
    """A shortest cycle [a, b, ..., a] in the graph (of units or of modules), or None when it has none."""
    best: Optional[List[str]] = None
    for start in sorted(graph):
        paths = {start: [start]}  # breadth first: the first way back to `start` is the shortest
        frontier = [start]
        while frontier:
            following = []
            for unit in frontier:
                for target in sorted(graph.get(unit, {})):
                    if target == start and (best is None or len(paths[unit]) + 1 < len(best)):
                        best = paths[unit] + [start]
                    elif target not in paths:
                        paths[target] = paths[unit] + [target]
                        following.append(target)
            frontier = following
    return best


def describe_cycle(graph: Dict[str, Dict[str, List[str]]], cycle: List[str]) -> str:
    """The cycle as 'a -> b (module:line imports name) -> ...', one import per edge."""
    steps = [f"{a} -> {b} ({graph[a][b][0]})" for a, b in zip(cycle, cycle[1:])]
    return "; ".join(steps)


def headrace_sources() -> Dict[str, str]:
    return {name: path.read_text(encoding="utf-8") for name, path in module_names().items()}


def test_the_import_graph_sees_every_package():
    graph = unit_graph(headrace_sources())
    assert set(LAYERED_PACKAGES) <= set(graph)
    assert "headrace.pipeline" in graph["headrace.runners"]  # the runners build on the graph


def test_no_import_cycle_between_packages():
    graph = unit_graph(headrace_sources())
    cycle = find_cycle(graph)
    assert cycle is None, (
        "import cycle between headrace's packages (see 'Layering rules' in docs/architecture.md): "
        + describe_cycle(graph, cycle))


def test_nothing_below_the_runners_imports_them():
    graph = unit_graph(headrace_sources())
    bad = {unit: graph[unit]["headrace.runners"] for unit in graph
           if unit not in ("headrace", "headrace.runners", "headrace.cli", "headrace.examples",
                           "headrace.report")
           and "headrace.runners" in graph[unit]}
    assert not bad, ("look runners up by name through headrace.pipeline.runner_registry instead "
                     f"of importing headrace.runners: {bad}")


def _fake_package(**modules: str) -> Dict[str, str]:
    return {f"headrace.{name}": source for name, source in modules.items()}


@pytest.mark.parametrize("sources, expected", [
    (_fake_package(**{"pipeline.__init__": "", "pipeline.pipeline": (
        "def run():\n    from headrace.runners import create_runner\n"),
        "runners.__init__": "", "runners.local": "from ..pipeline.pipeline import run"}),
     ["headrace.pipeline", "headrace.runners", "headrace.pipeline"]),
    (_fake_package(**{"io.__init__": "", "io.textio": "import importlib\n"
                      "importlib.import_module('headrace.testing.util')",
                      "testing.__init__": "", "testing.util": "from headrace.io import textio"}),
     ["headrace.io", "headrace.testing", "headrace.io"]),
    (_fake_package(**{"model.__init__": "", "model.window": "from . import time",
                      "model.time": "from headrace.model import window",
                      "transforms.__init__": "", "transforms.core": "from headrace import model"}),
     None),
    (_fake_package(**{"pipeline.__init__": "", "pipeline.runner_registry": (
        "import importlib\nFACTORY = 'headrace.runners.local:LocalRunner'\n"
        "def load(path):\n    return importlib.import_module(path.split(':')[0])\n"),
        "runners.__init__": "", "runners.local": "from headrace.pipeline import runner_registry"}),
     None),
])
def test_cycle_finder(sources, expected):
    assert find_cycle(unit_graph(sources)) == expected


# ---- no import cycle between the modules of the model, the kit and the local runner ---------------
#
# Within a package the same rule holds module by module: the model's modules (windows below
# the triggers below the windowing strategy), the kit's and the local runner's (the units see
# the executor through a Protocol, `units.UnitHost`, and do not import it) form no circle.
# Imports are read as above (inside functions and under TYPE_CHECKING too); an edge goes from
# a module to the module it names (`from headrace.model.window import X` names
# headrace.model.window; `from headrace.model import window` names the package and the module).
# A package's `__init__` is the package's node.

MODULE_CYCLE_PACKAGES = ("headrace.model", "headrace.runners")


def module_graph(sources: Dict[str, str], packages: Tuple[str, ...] = MODULE_CYCLE_PACKAGES
                 ) -> Dict[str, Dict[str, List[str]]]:
    """{module: {imported module: ['module:line imports name', ...]}} between the modules of
    `packages` (modules given as {name: code}; a package's `__init__` named as the package)."""
    names = {m[: -len(".__init__")] if m.endswith(".__init__") else m: m for m in sources}
    covered = {m for m in names if any(_within(m, p) for p in packages)}
    graph: Dict[str, Dict[str, List[str]]] = {}
    for module in sorted(covered):
        edges = graph.setdefault(module, {})
        found = [(line, name, resolve(name, set(names)))
                 for line, name in imported_modules(sources[names[module]], names[module])]
        for line, name, target in found:
            if target is None or target == module or target not in covered:
                continue
            # `from pkg import submodule` names the package, then the submodule: only the
            # submodule is imported from (the package's __init__ runs first in any case)
            if any(t != target and t is not None and _within(t, target) and ln == line
                   for ln, _, t in found):
                continue
            edges.setdefault(target, []).append(f"{module}:{line} imports {name}")
    return graph


def test_the_module_graph_sees_every_covered_module():
    graph = module_graph(headrace_sources())
    assert {"headrace.model.window", "headrace.model.strategy", "headrace.model.triggers.algebra",
            "headrace.runners.local.units", "headrace.runners.local.executor",
            "headrace.runners.kit.plan"} <= set(graph)
    assert "headrace.model.window" in graph["headrace.model.strategy"]
    assert "headrace.runners.local.units" in graph["headrace.runners.local.executor"]


def test_no_import_cycle_between_modules():
    graph = module_graph(headrace_sources())
    cycle = find_cycle(graph)
    assert cycle is None, (
        "import cycle between modules of " + ", ".join(MODULE_CYCLE_PACKAGES) + " (move the shared "
        "part to a module both can import, or hand one side a Protocol): "
        + describe_cycle(graph, cycle))


@pytest.mark.parametrize("sources, expected", [
    # the old layout in miniature: window.py held Windowing and imported the triggers, whose
    # algebra imports window.py (for a type)
    ({"headrace.model.__init__": "", "headrace.model.triggers.__init__": "",
      "headrace.model.window": "from headrace.model.triggers.algebra import TriggerFn",
      "headrace.model.triggers.algebra": (
          "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
          "    from headrace.model.window import BoundedWindow\n")},
     ["headrace.model.triggers.algebra", "headrace.model.window",
      "headrace.model.triggers.algebra"]),
    ({"headrace.runners.local.__init__": "",
      "headrace.runners.local.units": "def f():\n    from . import executor",
      "headrace.runners.local.executor": "from headrace.runners.local.units import Unit"},
     ["headrace.runners.local.executor", "headrace.runners.local.units",
      "headrace.runners.local.executor"]),
    ({"headrace.model.__init__": "", "headrace.model.strategy": "from headrace.model import window",
      "headrace.model.window": "from headrace.model.time import Timestamp",
      "headrace.model.time": ""},
     None),
    # `from a package import a submodule` imports from the submodule, not the package's __init__
    ({"headrace.runners.__init__": "", "headrace.runners.spark.__init__": (
        "from headrace.runners.spark.runner import SparkRunner"),
      "headrace.runners.spark.runner": "from headrace.runners.spark import session",
      "headrace.runners.spark.session": ""},
     None),
    ({"headrace.runners.__init__": "", "headrace.runners.spark.__init__": (
        "from headrace.runners.spark.runner import SparkRunner\nVERSION = 1"),
      "headrace.runners.spark.runner": "from headrace.runners.spark import VERSION"},
     ["headrace.runners.spark", "headrace.runners.spark.runner", "headrace.runners.spark"]),
    # a cycle that leaves the covered packages is the package check's business
    ({"headrace.model.__init__": "", "headrace.model.window": "import headrace.pipeline.pvalue",
      "headrace.pipeline.__init__": "", "headrace.pipeline.pvalue": "import headrace.model.window"},
     None),
])
def test_module_cycle_finder(sources, expected):
    assert find_cycle(module_graph(sources)) == expected


@pytest.mark.parametrize("source, module", [
    ("from ..time import Timestamp", "headrace.model.triggers.example"),
    ("from .algebra import TriggerFn", "headrace.model.triggers.sugar"),
    ("from . import algebra", "headrace.model.triggers.__init__"),
    ("from ... import errors", "headrace.model.triggers.example"),
])
def test_checker_allows_relative_imports_within_the_model(source, module):
    assert not violations(source, module)


# ---- the runner kit ----------------------------------------------------------------------------
# Every runner builds on headrace.runners.kit; the kit must import no engine (pyspark, py4j,
# pandas, numpy, pyarrow) and no runner (runners.local, runners.spark), so that a runner is the
# kit adapted to an engine and never the other way round.

KIT_DIR = PACKAGE_DIR / "runners" / "kit"


def kit_violations(source: str, module: str) -> List[str]:
    """The kit's imports of an engine or of a concrete runner, as 'line: name'."""
    bad = []
    for line, name in imported_modules(source, module):
        if any(_within(name, p) for p in ENGINE_PACKAGES) or any(
                _within(name, p) for p in ("headrace.runners.local", "headrace.runners.spark")):
            bad.append(f"{line}: {name}")
    return bad


def test_the_kit_has_modules():
    assert {p.stem for p in KIT_DIR.glob("*.py")} >= {"plan", "stage", "grouping", "dofn_runner"}


@pytest.mark.parametrize("path", sorted(KIT_DIR.rglob("*.py")), ids=lambda p: p.name)
def test_the_kit_imports_no_engine_and_no_runner(path):
    module = module_name(path)
    assert not kit_violations(path.read_text(encoding="utf-8"), module), (
        f"{module} imports an engine or a runner; the kit is shared by every runner")


@pytest.mark.parametrize("source", ["import pyspark", "from headrace.runners.spark.worker import env",
                                    "def f():\n    import numpy as np",
                                    "from ..local import units"])
def test_the_kit_check_catches_engine_and_runner_imports(source):
    assert kit_violations(source, "headrace.runners.kit.grouping")


# ---- the Spark runners as siblings ---------------------------------------------------------------
# runners/spark/ holds two runners side by side, batch/ (RDDs) and streaming/ (one Structured
# Streaming query), over what both run inside Spark tasks (worker/), the vectorised path
# (fastpath/) and the session code; runner.py's SparkRunner chooses between them. Neither runner
# imports the other, and the shared parts import neither, so each has one obvious place for
# what only it does. Sizes are bounded so that each module keeps to one idea.

SPARK_DIR = PACKAGE_DIR / "runners" / "spark"
RUNNERS_DIR = PACKAGE_DIR / "runners"
SPARK = "headrace.runners.spark"
#: What each part of runners/spark may import of runners/spark (besides itself).
SPARK_MAY_IMPORT = {
    "batch": ("worker", "fastpath", "session", "pyspark_compat", "logs", "progress"),
    "streaming": ("worker", "fastpath", "session", "pyspark_compat", "logs", "progress"),
    "worker": (),
    "fastpath": (),
}
MAX_SPARK_MODULE_LINES = 500
MAX_RUNNER_FUNCTION_LINES = 80
#: Functions of runners/ allowed to be longer, each with the reason (the per-key hot loops).
LONG_FUNCTIONS: Dict[str, str] = {}


def spark_part(module: str) -> Optional[str]:
    """The part of runners/spark a module belongs to ('batch', 'worker', 'runner', ...), or None."""
    if not _within(module, SPARK):
        return None
    rest = module[len(SPARK) + 1:].split(".")
    return rest[0] if rest and rest[0] else "__init__"


def sibling_violations(source: str, module: str) -> List[str]:
    """The imports of runners/spark modules that `module`'s part may not make, as 'line: name'."""
    part = spark_part(module)
    if part not in SPARK_MAY_IMPORT:
        return []
    allowed = SPARK_MAY_IMPORT[part] + (part,)
    bad = []
    for line, name in imported_modules(source, module):
        target = spark_part(name)
        # `from headrace.runners.spark import X` names the package and then X: judged by X
        if target is not None and target != "__init__" and target not in allowed:
            bad.append(f"{line}: {name}")
    return bad


SPARK_FILES = sorted(SPARK_DIR.rglob("*.py"))


def test_runners_spark_has_the_sibling_layout():
    parts = {p.name for p in SPARK_DIR.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert {"batch", "streaming", "worker", "fastpath"} <= parts
    assert not (SPARK_DIR / "tasks.py").exists() and not (RUNNERS_DIR / "spark_daemon.py").exists()


@pytest.mark.parametrize("path", SPARK_FILES, ids=lambda p: p.relative_to(SPARK_DIR).as_posix())
def test_spark_parts_import_only_what_they_may(path):
    module = module_name(path)
    bad = sibling_violations(path.read_text(encoding="utf-8"), module)
    assert not bad, (f"{module} imports {bad}; the batch and streaming runners never import each "
                     f"other, and worker/ and fastpath/ import neither (see SPARK_MAY_IMPORT): move "
                     "what both need into worker/ or the kit")


@pytest.mark.parametrize("source, module", [
    ("from headrace.runners.spark.tasks import SideStub, pack", "headrace.runners.spark.streaming.processor"),
    ("from headrace.runners.spark import tasks", "headrace.runners.spark.streaming.runner"),
    ("from headrace.runners.spark.streaming import rows", "headrace.runners.spark.batch.tasks"),
    ("from ..streaming.offsets import Offset", "headrace.runners.spark.batch.translation"),
    ("from headrace.runners.spark.batch.env import TaskEnv", "headrace.runners.spark.worker.env"),
    ("def f():\n    from headrace.runners.spark.runner import SparkRunner",
     "headrace.runners.spark.worker.sides"),
    ("from headrace.runners.spark import SparkRunner", "headrace.runners.spark.batch.tasks"),
])
def test_the_sibling_check_catches_cross_imports(source, module):
    assert sibling_violations(source, module)


@pytest.mark.parametrize("source, module", [
    ("from headrace.runners.spark.worker.packing import pack", "headrace.runners.spark.streaming.stages"),
    ("from headrace.runners.spark.fastpath import vector_chain", "headrace.runners.spark.batch.map_side"),
    ("from . import rows", "headrace.runners.spark.streaming.__init__"),
    ("from headrace.runners.kit.plan import plan", "headrace.runners.spark.worker.env"),
    ("from headrace.runners.spark.batch.translation import BatchTranslation",
     "headrace.runners.spark.runner"),
])
def test_the_sibling_check_allows_the_layering(source, module):
    assert not sibling_violations(source, module)


@pytest.mark.parametrize("path", SPARK_FILES, ids=lambda p: p.relative_to(SPARK_DIR).as_posix())
def test_no_spark_module_is_over_500_lines(path):
    n = len(path.read_text(encoding="utf-8").splitlines())
    assert n <= MAX_SPARK_MODULE_LINES, (
        f"{path.relative_to(PACKAGE_DIR)} has {n} lines: split it by idea (at most "
        f"{MAX_SPARK_MODULE_LINES} lines a module in runners/spark)")


def long_functions(source: str, limit: int = MAX_RUNNER_FUNCTION_LINES) -> List[Tuple[str, int]]:
    """(qualified name, lines) of every function in `source` longer than `limit` lines (nested
    functions and methods too; a function's lines include those of what it nests)."""
    found: List[Tuple[str, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    n = (child.end_lineno or child.lineno) - child.lineno + 1
                    if n > limit:
                        found.append((name, n))
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return found


RUNNER_FILES = sorted(RUNNERS_DIR.rglob("*.py"))


@pytest.mark.parametrize("path", RUNNER_FILES, ids=lambda p: p.relative_to(RUNNERS_DIR).as_posix())
def test_no_runner_function_is_over_80_lines(path):
    module = module_name(path)
    long = [(name, n) for name, n in long_functions(path.read_text(encoding="utf-8"))
            if f"{module}:{name}" not in LONG_FUNCTIONS]
    assert not long, (f"{module}: functions over {MAX_RUNNER_FUNCTION_LINES} lines {long}; split "
                      "them (or, for a per-key hot loop, list it in LONG_FUNCTIONS with the reason)")


def test_long_functions_counts_nested_functions():
    body = "".join(f"    x{i} = {i}\n" for i in range(85))
    source = f"def outer():\n    def inner():\n{textwrap.indent(body, '    ')}    return inner\n"
    assert [name for name, _ in long_functions(source)] == ["outer", "outer.inner"]
    assert long_functions("def short():\n    return 1\n") == []
