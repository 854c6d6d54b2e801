"""The local (reference) runner."""

from headrace.runners.local.runner import LocalRunner

__all__ = ["LocalRunner"]
