"""Where the output of a Spark that headrace starts goes: a log file, not the terminal.

A Spark that PySpark starts writes on the terminal: the JVM's own warnings ("Using incubator
modules"), Spark's log4j messages, and everything its Python workers print (PySpark's
Structured Streaming workers report each call of a stateful operator that way). When headrace
starts Spark in this process, it starts PySpark's JVM (the "gateway", as PySpark would, with
the same configuration) with its standard error going to a log file (`--spark_log`, else a new
file in the temporary directory, named once on standard error), and log4j configured by
`log4j2.properties` beside this module: warnings and errors to that file; errors also on the
terminal, as one line "headrace: Spark error in ...", but not Spark's reports of a failed task
or of a streaming query that ended with an error (headrace raises that error on the driver
itself, naming the step).

What a Python worker prints (a DoFn's `print`, `LogElements`) goes to the log too, as it goes
to the executors' logs on a cluster. A JVM that was already running in this process (a user's
session, even stopped) keeps its output where it was; the first Spark headrace starts in a
process decides the log of the process.

PySpark has no public way to start its JVM with other output streams for a session built by
`SparkSession.builder`: `pyspark.java_gateway.launch_gateway(conf, popen_kwargs)` starts it,
and `SparkContext._ensure_initialized(gateway=...)` (checked against PySpark 4.3.0) makes
PySpark use it. If a PySpark release lacks the latter, Spark starts as PySpark starts it and
writes on the terminal, as before.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import tempfile
import threading
import uuid
from typing import IO, Any, Iterator, List, Optional, Tuple, Union

from headrace.errors import PipelineExecutionError
from headrace.runners.spark import spark_home

LOG4J_OPTION = "-Dlog4j2.configurationFile=" + os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "log4j2.properties")
"""The JVM option that points Spark's log4j at headrace's configuration."""

_LOCK = threading.Lock()
_LOG: Optional[str] = None  # the log of the JVM headrace started in this process


def current_log() -> Optional[str]:
    """The log file of the Spark JVM headrace started in this process (None: it started none)."""
    return _LOG


#: The driver JVM's JIT compiler when the user's options choose none: C1 alone. The driver's
#: work per Spark job and micro-batch is wide rather than hot (Spark's planner, scheduler and
#: state code, each method run a few times a batch), so full tiered compilation kept its C2
#: compiler busy for minutes: headrace's streaming benchmark at 200 micro-batches ran 1.11x
#: faster with C1 alone, at 40 micro-batches 1.33x, using about 30-45% less CPU
#: (benchmarks/README.md, "One Python daemon, and the driver's JIT compiler").
JIT_OPTION = "-XX:TieredStopAtLevel=1"

#: With C1 alone, its compile thresholds at 0.3 of the JVM's (unless the user's options scale
#: them): Spark's wide code is compiled sooner. Three interleaved rounds of headrace's streaming
#: benchmark (1,000 and 10,000 keys, fixed windows and sessions) ran 1.8-6.6% more events a
#: second with it (means per cell; faster in 11 of 12 pairs, p50 the same or lower in all 12),
#: its first batch 0.1-0.2 s longer; 0.1 was 20% slower (the compiler's own work), 0.2 as 0.3;
#: bounded jobs were unchanged (benchmarks/README.md, "C1's compile thresholds").
THRESHOLD_OPTION = "-XX:CompileThresholdScaling=0.3"

#: the environment variables whose options every java takes, before its command line's
JAVA_ENV_OPTIONS = ("JDK_JAVA_OPTIONS", "JAVA_TOOL_OPTIONS")


def java_options(conf: List[Tuple[str, str]]) -> str:
    """`spark.driver.extraJavaOptions` for a Spark headrace starts: the --spark_conf value, with
    headrace's log configuration first unless that value names a log4j configuration itself,
    the JVM class archive (`jvm_archive`) when one is built and the value names none, and C1
    as the JIT compiler (`JIT_OPTION`) unless the value, JDK_JAVA_OPTIONS or JAVA_TOOL_OPTIONS
    chooses the compilation tiers, with its thresholds scaled (`THRESHOLD_OPTION`) unless they
    scale them."""
    from headrace.runners.spark import jvm_archive
    given = [v for k, v in conf if k == "spark.driver.extraJavaOptions"]
    value = given[-1] if given else ""
    parts = [] if "log4j2.configurationFile" in value else [LOG4J_OPTION]
    if "SharedArchiveFile" not in value and "ArchiveClassesAtExit" not in value:
        parts.append(jvm_archive.java_options())
    # the user's choice of tiers, in the value or in the options every java takes (which come
    # first on its command line, so headrace's would override them)
    chosen = " ".join([value] + [os.environ.get(v, "") for v in JAVA_ENV_OPTIONS])
    if "TieredStopAtLevel" not in chosen and "TieredCompilation" not in chosen:
        parts.append(JIT_OPTION)
        if "CompileThresholdScaling" not in chosen:
            parts.append(THRESHOLD_OPTION)
    parts.append(value)
    return " ".join(p for p in parts if p)


def _new_log(chosen: Optional[str]) -> str:
    """The path of the log: --spark_log (its directory created), else a new temporary file."""
    if chosen:
        path = os.path.abspath(os.path.expanduser(chosen))
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "ab"):
                pass
        except OSError as exc:
            raise PipelineExecutionError(
                f"--spark_log={chosen}: cannot write Spark's log there ({exc.strerror}); give a "
                "file in a writable directory") from exc
        return path
    fd, path = tempfile.mkstemp(prefix="headrace-spark-", suffix=".log")
    os.close(fd)
    return path


def start_jvm(conf: List[Tuple[str, str]], chosen: Optional[str], connect: bool = False,
              python_path: Optional[str] = None) -> None:
    """Starts PySpark's JVM with `conf` (the session's Spark configuration, its master included)
    and its output going to the log (`chosen`, else a new file), unless a JVM already runs in
    this process; names the log on standard error. `connect`: for a Spark Connect server in
    this process (`remote("local[N]")`), which PySpark starts with its own environment, and
    `python_path` the JVM's PYTHONPATH then (its Python workers take it: a Spark Connect UDF
    carries no executor environment)."""
    global _LOG
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway
    ensure = getattr(SparkContext, "_ensure_initialized", None)
    with _LOCK:
        if (ensure is None or getattr(SparkContext, "_gateway", None) is not None
                or "PYSPARK_GATEWAY_PORT" in os.environ):
            return  # a JVM runs already (or PySpark offers no way in): its output stays put
        path = _new_log(chosen)
        spark_conf = SparkConf(loadDefaults=False)
        for k, v in conf:
            spark_conf.set(k, v)
        saved = os.environ.pop("SPARK_REMOTE", None) if connect else None
        home = spark_home.bytecode_home()  # Spark's Python processes import PySpark's bytecode
        if home is not None:
            os.environ["SPARK_HOME"] = home  # for the JVM only: restored below
        saved_path = os.environ.get("PYTHONPATH")
        if connect:  # as PySpark's own start of a local Spark Connect server does
            os.environ.setdefault("SPARK_CONNECT_AUTHENTICATE_TOKEN", str(uuid.uuid4()))
            if python_path:
                os.environ["PYTHONPATH"] = python_path  # for the JVM only: restored below
        try:
            with open(path, "ab") as log, _imports_while_starting(connect):
                # stdout: log4j's one-line errors for the user (and nothing else Spark writes)
                gateway = launch_gateway(spark_conf, popen_kwargs={"stdout": _terminal(log),
                                                                   "stderr": log})
        except Exception as exc:
            raise PipelineExecutionError(
                f"could not start Spark ({type(exc).__name__}: {str(exc).rstrip('.')}). Its "
                f"output, in {path}, "
                f"ends with:\n{_tail(path)}\nCheck that Java 17 or 21 is installed (java "
                "-version) and the --spark_conf entries") from exc
        finally:
            if saved is not None:
                os.environ["SPARK_REMOTE"] = saved
            if home is not None:
                os.environ.pop("SPARK_HOME", None)
            if saved_path is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = saved_path
        ensure(gateway=gateway)
        _LOG = path
    print(f"headrace: Spark's log (its warnings, and what its Python workers print) is {path}",
          file=sys.stderr)


#: What a Spark start imports once its JVM is up (PySpark's SQL modules, and the pandas and
#: pyarrow they load: about 0.5 s of one core here), imported while the JVM starts instead.
EARLY_IMPORTS = ("pyspark.sql", "pandas", "pyarrow")
#: ... and, for a Spark Connect server in this process, PySpark's Spark Connect client (gRPC).
EARLY_CONNECT_IMPORTS = ("pyspark.sql.connect.session",)


@contextlib.contextmanager
def _imports_while_starting(connect: bool) -> Iterator[None]:
    """Imports `EARLY_IMPORTS` in a thread while PySpark's launcher waits for the JVM it
    spawned (it polls for the JVM's connection file), and waits for them where the block ends:
    0.1-0.4 s less per Spark start here (benchmarks/README.md, "Spark Connect's classes in the
    archive"). The thread starts once the JVM's process is spawned (the launcher's `Popen`,
    wrapped for the block; checked against PySpark 4.3.0), never before: it does not run while
    the launcher forks, whose `preexec_fn` runs Python in the child."""
    from pyspark import java_gateway
    spawn = getattr(java_gateway, "Popen", None)
    if spawn is None:   # a PySpark whose launcher spawns otherwise: the imports come later
        yield
        return
    names = EARLY_IMPORTS + (EARLY_CONNECT_IMPORTS if connect else ())

    def imports() -> None:
        for name in names:
            try:
                importlib.import_module(name)
            except Exception:   # imported again where it is needed, and reported there
                pass

    thread = threading.Thread(target=imports, name="headrace-early-imports", daemon=True)

    def popen(*args: Any, **kwargs: Any) -> Any:
        process = spawn(*args, **kwargs)
        if thread.ident is None:   # not started yet
            thread.start()
        return process

    setattr(java_gateway, "Popen", popen)
    try:
        yield
    finally:
        setattr(java_gateway, "Popen", spawn)
        if thread.ident is not None:
            thread.join()


def _terminal(fallback: IO[bytes]) -> Union[int, IO[bytes]]:
    """This process's standard error as a file descriptor for the JVM's standard output (where
    log4j writes the one-line errors), or `fallback` when there is none."""
    try:
        stream = sys.__stderr__
        return stream.fileno() if stream is not None else fallback
    except (OSError, ValueError):
        return fallback


def _tail(path: str, lines: int = 15) -> str:
    """The last lines of a file, indented (empty if it cannot be read)."""
    try:
        with open(path, errors="replace") as fh:
            text = fh.read().splitlines()[-lines:]
    except OSError:
        return ""
    return "\n".join("    " + line for line in text)
