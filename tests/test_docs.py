"""docs/architecture.md, the map of the code, names only paths that exist.

What counts as a path, and where it is looked up:

* The package-layout tree (the fenced block under "## Package layout"): every line is one
  entry, a file or a directory (ending in `/`), indented two spaces per directory level under
  `headrace/`, followed by its description. An entry's path is its ancestors' names joined, and
  must exist. A line that is not an entry fails the test too, so the tree stays one line per
  module.
* Backticked names that look like paths: names of letters, digits, `_`, `.`, `-` and `/` that
  end in `.py`, `.md`, `.properties` or `/` (so a metric name like `headrace/dropped_late_elements`
  is not a path). The map names modules relative to the repository root
  (`tests/test_architecture.py`), to `headrace/` (`runners/kit/plan.py`, `model/reduce.py`), to
  `headrace/runners/` (`kit/sources.py`, `spark/`) or to `headrace/runners/spark/`
  (`batch/translation.py`, `worker/env.py`); a name must exist under one of these roots.
  Dotted names (`kit.plan.plan`), flags and placeholders (`<checkpoint>/...`) are not paths.
* Plain-text paths outside backticks and code blocks that start with `docs/`, `tests/`,
  `benchmarks/` or `headrace/` and end in `.md` or `.py` (e.g. docs/semantics.md): relative to
  the repository root.
* Markdown links (`[text](target)`) that are not URLs: relative to docs/, and every link to a
  design note (`design/*.md`) must resolve; every note in docs/design/ must be linked.

The design notes under docs/design/ are held to the same rules for backticked and plain-text
paths.
"""

from __future__ import annotations

import pathlib
import re
from typing import List, Tuple

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
MAP = DOCS / "architecture.md"
#: Where a backticked name in the map may be rooted, in the order tried.
ROOTS = (ROOT, ROOT / "headrace", ROOT / "headrace" / "runners", ROOT / "headrace" / "runners" / "spark")

_BACKTICKED = re.compile(r"`([^`\s]+)`")
_PATHLIKE = re.compile(r"^[\w.\-/]+$")
_PATH_ENDINGS = (".py", ".md", ".properties", "/")
_PLAIN_PATH = re.compile(r"(?<![\w/.`])((?:docs|tests|benchmarks|headrace)/[\w./\-]*\w\.(?:md|py))\b")
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_ENTRY = re.compile(r"^( *)([\w.\-]+(?:/|\.py|\.properties))(?:\s{2,}\S.*)?$")


def layout_block(text: str) -> List[str]:
    """The lines of the fenced block under "## Package layout" (empty if there is none)."""
    section = text.split("## Package layout", 1)
    if len(section) < 2:
        return []
    fence = section[1].split("```", 2)
    return fence[1].strip("\n").splitlines() if len(fence) > 2 else []


def layout_paths(lines: List[str]) -> Tuple[List[str], List[str]]:
    """The repository paths of the layout tree's entries, and the lines that are not entries."""
    paths: List[str] = []
    bad: List[str] = []
    stack: List[str] = []
    for line in lines:
        m = _ENTRY.match(line)
        if m is None or len(m.group(1)) % 2:
            bad.append(line)
            continue
        depth = len(m.group(1)) // 2
        if depth > len(stack):
            bad.append(line)
            continue
        del stack[depth:]
        paths.append("".join(stack) + m.group(2))
        if m.group(2).endswith("/"):
            stack.append(m.group(2))
    return paths, bad


def _outside_code(text: str) -> str:
    """The text without fenced code blocks."""
    return "".join(part for i, part in enumerate(text.split("```")) if i % 2 == 0)


def backticked_paths(text: str) -> List[str]:
    """The backticked names of the text (code blocks excluded) that look like paths."""
    names = []
    for name in _BACKTICKED.findall(_outside_code(text)):
        if _PATHLIKE.match(name) and "//" not in name and name.endswith(_PATH_ENDINGS):
            names.append(name)
    return names


def plain_paths(text: str) -> List[str]:
    """Repository paths written as plain text (outside backticks and code blocks)."""
    prose = _BACKTICKED.sub(" ", _outside_code(text))
    return _PLAIN_PATH.findall(prose)


def local_links(text: str) -> List[str]:
    """The targets of the text's Markdown links that are not URLs or anchors."""
    return [t for t in _LINK.findall(text) if "://" not in t and not t.startswith("#")]


def resolves(name: str) -> bool:
    """Whether a map name exists under one of ROOTS."""
    return any((root / name.rstrip("/")).exists() for root in ROOTS)


def missing_paths(text: str) -> List[str]:
    """Every path the map names that does not exist, each with where it was named."""
    missing = []
    paths, bad = layout_paths(layout_block(text))
    missing += [f"layout tree: {line.strip()!r} is not an entry line" for line in bad]
    missing += [f"layout tree: {p}" for p in paths if not (ROOT / p.rstrip("/")).exists()]
    missing += [f"`{n}`" for n in backticked_paths(text) if not resolves(n)]
    missing += [p for p in plain_paths(text) if not (ROOT / p).exists()]
    missing += [f"link {t}" for t in local_links(text) if not (DOCS / t.split("#")[0]).exists()]
    return sorted(set(missing))


def test_the_map_has_a_layout_tree():
    paths, _ = layout_paths(layout_block(MAP.read_text(encoding="utf-8")))
    assert "headrace/model/reduce.py" in paths and "headrace/runners/kit/plan.py" in paths


def test_every_path_in_the_map_exists():
    missing = missing_paths(MAP.read_text(encoding="utf-8"))
    assert not missing, ("docs/architecture.md names paths that do not exist; change the map with "
                         "the code (see this test's docstring for what counts as a path): "
                         + "; ".join(missing))


def test_every_design_note_is_linked_from_the_map_and_every_link_resolves():
    links = {t for t in local_links(MAP.read_text(encoding="utf-8")) if t.startswith("design/")}
    notes = {f"design/{p.name}" for p in (DOCS / "design").glob("*.md")}
    assert notes, "docs/design/ holds the design notes"
    assert not links - notes, f"links to design notes that do not exist: {sorted(links - notes)}"
    assert not notes - links, f"design notes the map does not link: {sorted(notes - links)}"


def test_design_notes_name_only_existing_paths():
    missing = {}
    for note in sorted((DOCS / "design").glob("*.md")):
        text = note.read_text(encoding="utf-8")
        gone = ([n for n in plain_paths(text) if not (ROOT / n).exists()]
                + [f"`{n}`" for n in backticked_paths(text) if not resolves(n)])
        if gone:
            missing[note.name] = gone
    assert not missing, f"design notes name files that do not exist: {missing}"


def test_the_checker_catches_stale_paths():
    stale = ("# m\n\n## Package layout\n\n```\nheadrace/  the package\n  runners/  runners\n"
             "    isolation.py  gone\n  not an entry\n```\n\nSee `runners/isolation.py`, "
             "`fastpath/columnar.py`, docs/nowhere.md and [x](design/nowhere.md); "
             "`kit.plan.plan`, `<checkpoint>/headrace/plan.pkl` and `--runner` are not paths.\n")
    assert missing_paths(stale) == sorted([
        "layout tree: 'not an entry' is not an entry line",
        "layout tree: headrace/runners/isolation.py",
        "`runners/isolation.py`", "`fastpath/columnar.py`", "docs/nowhere.md",
        "link design/nowhere.md"])
