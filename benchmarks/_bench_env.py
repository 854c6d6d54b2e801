"""What every benchmark reports about its setting: the headrace revision and the Beam Python."""

import os
import subprocess
from typing import Optional

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
BEAM_VENV_HINT = "python3 -m venv .venv-beam && .venv-beam/bin/pip install apache-beam"


def headrace_revision() -> str:
    """The git commit of the headrace under test, '+uncommitted' if headrace/ has local edits."""
    try:
        head = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--", "headrace"],
                               capture_output=True, text=True, check=True).stdout.strip()
        return head + ("+uncommitted" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"


def default_beam_python() -> str:
    """$BEAM_PYTHON, else the repository's .venv-beam (see BEAM_VENV_HINT)."""
    return os.environ.get("BEAM_PYTHON") or os.path.join(REPO, ".venv-beam", "bin", "python")


def beam_usable(py: str) -> Optional[str]:
    """None if `py` can import apache_beam, else the reason it cannot."""
    if not os.path.exists(py):
        return f"{py} does not exist"
    r = subprocess.run([py, "-c", "import apache_beam"], capture_output=True, text=True)
    if r.returncode != 0:
        return f"{py} cannot import apache_beam: {r.stderr.strip().splitlines()[-1:]}"
    return None
