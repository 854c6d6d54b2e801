"""The errors headrace raises; each message says what was wrong, where, and how to fix it."""

from __future__ import annotations

from typing import Any, Optional


class HeadraceError(Exception):
    """Base class of every error headrace raises on purpose."""


class InvalidArgumentError(HeadraceError, ValueError):
    """An argument to a transform, window function or option has the wrong type or value."""


class UnsupportedArgumentError(InvalidArgumentError):
    """An argument Beam accepts that headrace does not implement; the message names it and the way out."""


class PipelineConstructionError(HeadraceError, ValueError):
    """The pipeline graph is malformed (duplicate label, wrong input kind, bad composition)."""


class DuplicateLabelError(PipelineConstructionError, RuntimeError):
    """Two transforms were applied with the same full label."""


class TypeCheckError(PipelineConstructionError, TypeError):
    """Connected steps declare element types that cannot agree (Beam's typehints.TypeCheckError)."""


class KeyEncodingError(HeadraceError, TypeError):
    """A grouping key cannot be encoded deterministically, so equal keys might not group."""


class DataFormatError(HeadraceError, ValueError):
    """Data does not fit its file format (a malformed JSON line, a row that does not fit a schema)."""


class ElementError(HeadraceError):
    """An element could not be processed by a step (wraps the user's exception)."""

    def __init__(self, step: str, element: Any, cause: BaseException, phase: str = "process",
                 hint: str = ""):
        self.step = step
        self.element = element
        self.cause = cause
        self.phase = phase
        #: A sentence on the likely cause, when the runner knows one (else "").
        self.hint = hint
        super().__init__(
            f"step '{step}' failed in {phase} on element {_short_repr(element)}: "
            f"{type(cause).__name__}: {cause}" + (f". {hint}" if hint else ""))


class PipelineExecutionError(HeadraceError, RuntimeError):
    """The pipeline failed while running; names the step and element that failed."""

    def __init__(self, message: str, step: Optional[str] = None, element: Any = None,
                 attempts: int = 0):
        self.step = step
        self.element = element
        self.attempts = attempts
        super().__init__(message)


class DeadLetterThresholdError(PipelineExecutionError):
    """Too large a fraction of a step's input went to its dead-letter output (`threshold`)."""


def _short_repr(value: Any, limit: int = 200) -> str:
    try:
        text = repr(value)
    except Exception as exc:  # a broken __repr__ must not hide the real error
        text = f"<unprintable {type(value).__name__}: {exc}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."
