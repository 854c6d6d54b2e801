"""Layering rules: `headrace.model` is the engine-agnostic core and imports nothing above it.

The model (time, windows, triggers, the per-key reduce core, combining, coders) must not
import Spark, pandas, the pipeline graph, the runners, the transforms or the connectors, so
that every runner can drive the same core. Imports are read with `ast`, so imports inside
functions, under `if TYPE_CHECKING:` and relative imports all count.
"""

from __future__ import annotations

import ast
import pathlib
from typing import List, Tuple

import pytest

import headrace

PACKAGE_DIR = pathlib.Path(headrace.__file__).resolve().parent
MODEL_DIR = PACKAGE_DIR / "model"
FORBIDDEN = ("pyspark", "pandas", "headrace.pipeline", "headrace.runners", "headrace.transforms",
             "headrace.io")


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
            found.append((node.lineno, name))
            found.extend((node.lineno, f"{name}.{alias.name}") for alias in node.names)
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and ((isinstance(node.func, ast.Name) and node.func.id == "__import__")
                   or (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module"))):
            found.append((node.lineno, node.args[0].value))
    return found


def violations(source: str, module: str) -> List[str]:
    """The forbidden imports in `source`, as 'module:line imports name'."""
    out = []
    for line, name in imported_modules(source, module):
        if any(name == f or name.startswith(f + ".") for f in FORBIDDEN):
            out.append(f"{module}:{line} imports {name}")
    return out


MODEL_FILES = sorted(MODEL_DIR.glob("*.py"))


def test_model_package_has_modules():
    names = {p.stem for p in MODEL_FILES}
    assert {"__init__", "reduce", "window", "time", "trigger", "combine", "coders"} <= names


@pytest.mark.parametrize("path", MODEL_FILES, ids=lambda p: p.name)
def test_model_module_imports_nothing_above_the_model(path):
    module = "headrace.model." + path.stem if path.stem != "__init__" else "headrace.model.__init__"
    bad = violations(path.read_text(encoding="utf-8"), module)
    assert not bad, ("headrace.model must stay engine-agnostic (see docs/architecture.md); move the "
                     "code that needs these into runners/ or pipeline/: " + "; ".join(bad))


@pytest.mark.parametrize("source", [
    "import pyspark.sql",
    "from pandas import DataFrame",
    "def f():\n    from headrace.runners.local import runner",
    "from ..pipeline.pvalue import PCollection",
    "from .. import transforms",
    "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from headrace.io import textio",
    "import importlib\nimportlib.import_module('headrace.runners.common')",
])
def test_checker_catches_forbidden_imports(source):
    assert violations(source, "headrace.model.example")


@pytest.mark.parametrize("source", [
    "from headrace.model.time import Timestamp",
    "from .window import Sessions",
    "from headrace.errors import InvalidArgumentError",
    "import cloudpickle",
    "from headrace.iofoo import x",
])
def test_checker_allows_the_model_and_plain_dependencies(source):
    assert not violations(source, "headrace.model.example")
