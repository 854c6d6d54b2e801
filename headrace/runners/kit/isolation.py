"""Calling a DoFn apart from the runner: under a time limit, or in a child process that may die.

`ParDo.with_exception_handling(timeout=..., use_subprocess=...)` runs each element's call
through one of these, on every runner (ParDoRunner uses them on the local runner and inside
Spark tasks alike):

* `TimeLimit` runs the call in a worker thread and gives up waiting after `timeout` seconds
  with a `TimeoutError`. Python cannot stop a thread, so a call that timed out keeps running
  in the background until it returns (its outputs are dropped); as in Beam, only
  `use_subprocess=True` really stops it.
* `Subprocess` runs the DoFn in a long-lived child process (started with multiprocessing's
  default context, started again after a crash): `setup` and `start_bundle` run there lazily
  before its first element, `finish_bundle` and `teardown` when the runner calls them. Each
  element is sent there and its outputs (and metric updates) come back. If the child dies
  (`os._exit`, a segfault in a C library, being killed) while processing an element, the
  call raises `BrokenProcessPool` naming the exit code; after `timeout` seconds the child is
  killed and the call raises `TimeoutError`. Elements, arguments and outputs cross the
  process boundary with cloudpickle. `finish_bundle` may not emit outputs there: outputs held
  back for it would be lost without a trace if the child died (Beam refuses them too).
"""

from __future__ import annotations

import concurrent.futures
import logging
import multiprocessing
import pickle
import queue
import signal
import threading
import traceback
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

import cloudpickle

from headrace.errors import _short_repr
from headrace.metrics.metric import MetricsContainer, metrics_scope
from headrace.pipeline.dofn import _CallableWrapperDoFn

_log = logging.getLogger(__name__)


def invoke(kind: str, fn: Callable[..., Any], value: Any, args: tuple, kwargs: Dict[str, Any]
           ) -> Optional[Iterable[Any]]:
    """Calls a ParDo's function on one element the way its kind says; returns its outputs."""
    if kind == "map":
        return (fn(value, *args, **kwargs),)
    if kind == "filter":
        return (value,) if fn(value, *args, **kwargs) else ()
    if kind == "maptuple":
        return (fn(*value, *args, **kwargs),)
    if kind == "flatmaptuple":
        return fn(*value, *args, **kwargs)
    return fn(value, *args, **kwargs)


def outputs_of(result: Optional[Iterable[Any]]) -> List[Any]:
    """The outputs of a call as a list (drains a generator), or TypeError for a lone str/bytes/dict."""
    if result is None:
        return []
    if isinstance(result, (str, bytes, dict)):
        raise not_iterable_of_outputs(result)
    return list(result)


def not_iterable_of_outputs(result: Any) -> TypeError:
    """The error for a `process` that returned a str, bytes or dict instead of an iterable."""
    r = repr(result)
    short = r if len(r) < 40 else r[:37] + "..."
    return TypeError(
        f"process returned a {type(result).__name__}; it must return or yield an iterable "
        f"of outputs (wrap a single output in a list, e.g. [{short}])")


def kind_and_fn(dofn: Any) -> Tuple[str, Callable[..., Any]]:
    """What `invoke` needs for a DoFn: its kind and the function to call."""
    if isinstance(dofn, _CallableWrapperDoFn):
        return dofn.kind, dofn.fn
    return "dofn", dofn.process


def _timeout_error(label: str, timeout: float) -> TimeoutError:
    return TimeoutError(
        f"step {label!r}: processing the element took longer than timeout={timeout} seconds")


class _Worker(threading.Thread):
    """A daemon thread running the calls queued to it (daemon: one stuck forever does not block exit)."""

    def __init__(self) -> None:
        super().__init__(name="headrace-timeout", daemon=True)
        self.inbox: "queue.SimpleQueue[Any]" = queue.SimpleQueue()

    def run(self) -> None:
        while True:
            item = self.inbox.get()
            if item is None:
                return
            fn, future = item
            try:
                future.set_result(fn())
            except BaseException as exc:
                future.set_exception(exc)


class TimeLimit:
    """Runs calls in a worker thread and stops waiting for one after `timeout` seconds."""

    def __init__(self, label: str, timeout: float) -> None:
        self.label = label
        self.timeout = timeout
        self._worker: Optional[_Worker] = None

    def call(self, fn: Callable[[], Any]) -> Any:
        """`fn()`, or TimeoutError when it takes longer than the limit (it keeps running)."""
        if self._worker is None:
            self._worker = _Worker()
            self._worker.start()
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._worker.inbox.put((fn, future))
        try:
            return future.result(self.timeout)
        except concurrent.futures.TimeoutError:
            if future.done():  # the function itself raised TimeoutError
                raise
            self.close()  # the stuck thread is left to finish; later calls get a new one
            raise _timeout_error(self.label, self.timeout) from None

    def close(self) -> None:
        """Lets go of the worker thread (a call still running finishes in the background)."""
        if self._worker is not None:
            self._worker.inbox.put(None)
            self._worker = None


class SubprocessTraceback(Exception):
    """The traceback of an exception raised in a DoFn's subprocess (the `__cause__` of the re-raised one)."""


class Subprocess:
    """A DoFn living in a child process; `process` sends it one element and returns its outputs."""

    def __init__(self, label: str, dofn_bytes: bytes, timeout: Optional[float]) -> None:
        self.label = label
        self.dofn_bytes = dofn_bytes
        self.timeout = timeout
        self._proc: Any = None
        self._conn: Any = None

    # ---- what the runner calls ---------------------------------------------------------

    def process(self, value: Any, args: tuple, kwargs: Dict[str, Any], metrics: Any) -> List[Any]:
        """The outputs of the DoFn on `value` (its metric updates go to `metrics`, if given)."""
        return self._call(("process", value, args, kwargs), self.timeout, metrics)

    def finish_bundle(self, metrics: Any = None) -> None:
        """Calls finish_bundle in the child, if it processed elements of this bundle."""
        if self._proc is not None:
            self._call(("finish_bundle",), None, metrics)

    def teardown(self) -> None:
        """Calls teardown in the child (best effort) and stops it."""
        if self._proc is None:
            return
        try:
            self._call(("teardown",), 60, None)
        except Exception as exc:  # teardown is best effort, as in-process
            _log.debug("teardown of step %r in its subprocess failed: %s", self.label, exc)
        self._stop()

    # ---- the child process -------------------------------------------------------------

    def _start(self) -> None:
        ctx = multiprocessing.get_context()
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_child_main, args=(child, self.dofn_bytes, self.label),
                           name=f"headrace-dofn[{self.label}]", daemon=True)
        proc.start()
        child.close()
        self._proc, self._conn = proc, parent

    def _stop(self, kill: bool = False) -> Optional[int]:
        proc, conn = self._proc, self._conn
        self._proc = self._conn = None
        if proc is None:
            return None
        try:
            if not kill:
                try:
                    conn.send_bytes(pickle.dumps(("stop",)))
                except OSError:
                    pass
                proc.join(5)
            if proc.is_alive():
                proc.kill()
            proc.join(5)
        finally:
            conn.close()
        return proc.exitcode

    def _call(self, request: tuple, timeout: Optional[float], metrics: Any) -> Any:
        if self._proc is None:
            self._start()
        timed_out = False
        try:
            self._conn.send_bytes(cloudpickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL))
            timed_out = not self._conn.poll(timeout)
            data = b"" if timed_out else self._conn.recv_bytes()
        except (EOFError, OSError):  # the child is gone (TimeoutError, an OSError, is not raised here)
            code = self._stop(kill=True)
            raise BrokenProcessPool(
                f"the subprocess running step {self.label!r} died ({_exit_reason(code)}) while "
                f"doing {request[0]}{' on this element' if request[0] == 'process' else ''}"
            ) from None
        if timed_out:
            self._stop(kill=True)
            raise _timeout_error(self.label, timeout)  # type: ignore[arg-type]
        reply = pickle.loads(data)
        if metrics is not None and reply[-1] is not None:
            metrics.merge(reply[-1])
        if reply[0] == "ok":
            return reply[1]
        raise _remote_error(reply)


def _exit_reason(code: Optional[int]) -> str:
    if code is None:
        return "exit code unknown"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _remote_error(reply: tuple) -> BaseException:
    _, payload, type_name, text, tb, _metrics = reply
    exc: Optional[BaseException] = None
    if payload is not None:
        try:
            exc = pickle.loads(payload)
        except Exception:
            exc = None
    if not isinstance(exc, BaseException):
        exc = RuntimeError(f"{type_name} (not serialisable, so re-raised as RuntimeError): {text}")
    exc.__cause__ = SubprocessTraceback(tb)
    return exc


def _child_main(conn: Any, dofn_bytes: bytes, label: str) -> None:
    """The child's loop: requests in, (status, result, ..., metric updates) out, until 'stop'."""
    state: Dict[str, Any] = {"dofn": None, "started": False}
    while True:
        try:
            request = pickle.loads(conn.recv_bytes())
        except EOFError:
            return
        if request[0] == "stop":
            return
        container = MetricsContainer()
        try:
            with metrics_scope(container, label):
                reply: tuple = ("ok", _serve(state, dofn_bytes, label, request), container)
            data = cloudpickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            data = cloudpickle.dumps(_error_reply(exc, container), protocol=pickle.HIGHEST_PROTOCOL)
        conn.send_bytes(data)


def _error_reply(exc: BaseException, container: MetricsContainer) -> tuple:
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    payload: Optional[bytes]
    try:
        data = cloudpickle.dumps(exc, protocol=pickle.HIGHEST_PROTOCOL)
        pickle.loads(data)
        payload = data
    except Exception:
        payload = None
    return ("error", payload, type(exc).__qualname__, _short_repr(exc), tb, container)


def _serve(state: Dict[str, Any], dofn_bytes: bytes, label: str, request: tuple) -> Any:
    op = request[0]
    dofn = state["dofn"]
    if op == "process":
        if dofn is None:
            dofn = state["dofn"] = cloudpickle.loads(dofn_bytes)
            dofn.setup()
        if not state["started"]:
            dofn.start_bundle()
            state["started"] = True
        _, value, args, kwargs = request
        kind, fn = kind_and_fn(dofn)
        return outputs_of(invoke(kind, fn, value, args, kwargs))
    if op == "finish_bundle":
        if dofn is not None and state["started"]:
            state["started"] = False
            result = dofn.finish_bundle()
            if result is not None and list(result):
                raise RuntimeError(
                    f"step {label!r}: finish_bundle emitted outputs, which with_exception_handling("
                    "use_subprocess=True) cannot keep safely (a crash of the subprocess would lose "
                    "them without a trace); emit outputs from process instead, or drop use_subprocess")
        return None
    if op == "teardown":
        state["dofn"] = None
        state["started"] = False
        if dofn is not None:
            dofn.teardown()
        return None
    raise ValueError(f"unknown request {op!r}")
