"""A step's failure inside a Spark task, carried to the driver: the task raises `TaskFailure`,
whose message ends with the error (pickled, base64) between markers; Spark wraps that text in
its own exceptions (a Py4JJavaError, a StreamingQueryException), and the driver finds it there
again (`pipeline_error`) and raises the step's error as the local runner would."""

from __future__ import annotations

import base64
import pickle
from typing import Any, Callable, Dict, Optional

from headrace.errors import PipelineExecutionError, _short_repr

_MARK = "HEADRACE-TASK-ERROR["


class TaskFailure(Exception):
    """A step failed for good inside a Spark task; the message carries the error for the driver."""

    def __init__(self, payload: Dict[str, Any]) -> None:
        self.payload = payload
        data = base64.b64encode(pickle.dumps(payload)).decode("ascii")
        super().__init__(f"{payload['message']}\n{_MARK}{data}]")


def failure_payload(exc: PipelineExecutionError) -> Dict[str, Any]:
    """What a TaskFailure carries of `exc`: message, step, element (a short repr if it does not
    pickle), attempts and the error's class."""
    element: Any = exc.element
    try:
        pickle.dumps(element)
    except Exception:
        element = _short_repr(element)
    return {"message": str(exc), "step": exc.step, "element": element, "attempts": exc.attempts,
            "type": type(exc)}


def task_failure(exc: PipelineExecutionError) -> TaskFailure:
    """`exc` as the exception a task raises so that the driver gets it back (no marker: for
    steps that fail the same way when Spark re-runs them, such as a source's read)."""
    return TaskFailure(failure_payload(exc))


def decode_failure(text: str) -> Optional[Dict[str, Any]]:
    """The payload of a TaskFailure found in an error's text (e.g. a Py4JJavaError), if any."""
    i = text.rfind(_MARK)
    if i < 0:
        return None
    j = text.find("]", i)
    try:
        return pickle.loads(base64.b64decode(text[i + len(_MARK):j]))
    except Exception:
        return None


def first_line(exc: BaseException) -> str:
    """The first line of an error's text ('' when it has none)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""


def pipeline_error(exc: BaseException, what: str,
                   explain: Optional[Callable[[BaseException], Optional[BaseException]]] = None
                   ) -> BaseException:
    """A failed Spark job's or query's error as the driver raises it.

    A PipelineExecutionError stays as it is; a task's `TaskFailure` found in the text becomes
    the step's error, of the same class as on the local runner (raised without Spark's error
    as its context); otherwise `explain(exc)` (an error of a known cause, or None), else "the
    <what> failed: <first line>", either caused by `exc`."""
    if isinstance(exc, PipelineExecutionError):
        return exc
    payload = decode_failure(str(exc))
    err: BaseException
    if payload is not None:
        cls = payload.get("type", PipelineExecutionError)
        err = cls(payload["message"], step=payload["step"], element=payload["element"],
                  attempts=payload["attempts"])
        err.__suppress_context__ = True  # the step's error as the local runner raises it
        return err
    explained = explain(exc) if explain is not None else None
    err = explained if explained is not None else PipelineExecutionError(
        f"the {what} failed: {type(exc).__name__}: {first_line(exc)}")
    err.__cause__ = exc
    return err
