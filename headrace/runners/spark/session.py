"""The SparkSession the Spark runner uses: found, or created with settings a newcomer needs.

When no session is given, the runner creates one from `SparkRunnerOptions`: Spark's local mode
by default (`local[*]`), the Python workers running this interpreter (`PYSPARK_PYTHON`), this
process's import path on every worker (so DoFns defined in importable modules deserialise), and
task retries also in local mode (`local[N]` becomes `local[N,F]`, F = --spark_task_max_failures).
A session the runner created is reused by later pipelines with the same master and replaced when
a pipeline asks for another master; a session created by the user is used as it is. The
output of a Spark headrace starts goes to a log file, not the terminal (`logs`, --spark_log).

With `--spark_remote` (or PySpark's `SPARK_REMOTE` environment variable) the runner opens a
Spark Connect session instead: `sc://HOST:PORT` connects to a running Spark Connect server,
`local[N]` starts one inside this process (PySpark's `remote("local[N]")`). Such a session has
no SparkContext; only runtime Spark SQL settings can be changed through it, so a `--spark_conf`
entry that is not one (and differs from the server's value) is refused with the way out.
PySpark cannot run a classic and a Spark Connect session in one process, and says so here.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import warnings
from typing import Any, List, Optional, Tuple

from headrace.errors import InvalidArgumentError, PipelineExecutionError
from headrace.options.pipeline_options import SparkRunnerOptions
from headrace.runners.spark import logs, pyspark_compat

_LOCK = threading.Lock()
_OWNED: Optional[Tuple[Any, str]] = None  # (the session headrace created, its master or "remote:URL")
_LOCAL_N = re.compile(r"^local\[(\*|\d+)\]$")


def effective_master(master: Optional[str], max_failures: int) -> str:
    """The master URL to start: local mode by default, with task retries in local mode."""
    master = master or "local[*]"
    if master == "local":
        master = "local[1]"
    m = _LOCAL_N.match(master)
    if m and max_failures > 1:
        return f"local[{m.group(1)},{max_failures}]"
    return master


def parse_conf(entries: Optional[List[str]]) -> List[Tuple[str, str]]:
    """Parses --spark_conf KEY=VALUE entries."""
    out = []
    for e in entries or ():
        if "=" not in e:
            raise InvalidArgumentError(
                f"--spark_conf takes KEY=VALUE, got {e!r}; e.g. --spark_conf=spark.driver.memory=4g")
        k, v = e.split("=", 1)
        out.append((k.strip(), v.strip()))
    return out


def remote_url(options: Any) -> Optional[str]:
    """The Spark Connect URL a pipeline asks for: --spark_remote, else $SPARK_REMOTE, else None;
    refuses it together with --spark_master (one starts Spark here, the other connects)."""
    so = options.view_as(SparkRunnerOptions)
    remote = (so.spark_remote or os.environ.get("SPARK_REMOTE") or "").strip() or None
    if remote is None:
        return None
    if not (remote.startswith("sc://") or remote.startswith("local")):
        raise InvalidArgumentError(
            f"--spark_remote={remote}: a Spark Connect URL is sc://HOST:PORT (e.g. "
            "sc://localhost:15002), or local[N] to start a Spark Connect server in this process")
    if so.spark_master:
        where = "--spark_remote" if so.spark_remote else "the SPARK_REMOTE environment variable"
        raise InvalidArgumentError(
            f"--spark_master={so.spark_master} and {where} ({remote}) are both given: "
            "--spark_master starts Spark in this process, --spark_remote connects to a Spark Connect "
            "server; give one of them (unset SPARK_REMOTE to use --spark_master)")
    return remote


def is_connect(spark: Any) -> bool:
    """Whether `spark` is a Spark Connect session (no SparkContext, no RDDs)."""
    module = sys.modules.get("pyspark.sql.connect.session")
    return module is not None and isinstance(spark, module.SparkSession)


def worker_python_path() -> str:
    """This process's import path, for the Python workers (they must import the same modules)."""
    seen = []
    for p in [os.getcwd()] + sys.path:
        p = os.path.abspath(p or os.getcwd())
        if os.path.isdir(p) and p not in seen:
            seen.append(p)
    return os.pathsep.join(seen)


def _check_java() -> None:
    """Refuses to start Spark without the java its launcher would run (`jvm_archive.java_executable`)."""
    from headrace.runners.spark.jvm_archive import java_executable

    if java_executable() is not None:
        return
    home = os.environ.get("JAVA_HOME")
    where = (f"JAVA_HOME is {home}, which has no bin/java: point it at a Java 17 or 21 runtime, "
             "or unset it to use the java on the PATH" if home else
             "install one (on Debian/Ubuntu: apt-get install openjdk-17-jre-headless) or set "
             "JAVA_HOME to it")
    raise PipelineExecutionError(
        f"the Spark runner needs a Java 17 or 21 runtime and none was found: {where}")


def _startup_conf(so: Any, conf: List[Tuple[str, str]]) -> List[Tuple[str, str]]:
    """The Spark configuration of a Spark that headrace starts in this process: its defaults,
    then the --spark_conf entries (headrace's log configuration is kept in extraJavaOptions)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    out = [("spark.ui.showConsoleProgress", "false"),
           ("spark.executorEnv.PYTHONPATH", worker_python_path()),
           ("spark.executorEnv.PYSPARK_PYTHON", os.environ["PYSPARK_PYTHON"]),
           # Spark keeps one worker daemon per set of worker environment variables, and its SQL
           # runners add this one (tracebacks without PySpark's frames) where transformWithState's
           # does not: given to all, the stateful operator's workers fork from the same daemon
           # instead of a second one started in the first micro-batch (about 0.7 s)
           ("spark.executorEnv.SPARK_SIMPLIFIED_TRACEBACK", "1"),
           ("spark.task.maxFailures", str(int(so.spark_task_max_failures))),
           # workers forked with pyspark's and headrace's modules imported (see the module)
           ("spark.python.daemon.module", "headrace.runners.spark.worker.daemon")]
    out += [(k, v) for k, v in conf if k != "spark.driver.extraJavaOptions"]
    out.append(("spark.driver.extraJavaOptions", logs.java_options(conf)))
    return out


def _alive(session: Any) -> bool:
    """Whether a session headrace made can still run jobs (nobody stopped it)."""
    if is_connect(session):
        return not session.is_stopped
    return pyspark_compat.running_context() is session.sparkContext


def get_session(options: Any) -> Any:
    """The SparkSession for a pipeline with these options (created if need be)."""
    global _OWNED
    so = options.view_as(SparkRunnerOptions)
    remote = remote_url(options)
    master = effective_master(so.spark_master, int(so.spark_task_max_failures))
    conf = parse_conf(so.spark_conf)
    from pyspark.sql import SparkSession, is_remote

    with _LOCK:
        if _OWNED is not None:
            session, made_for = _OWNED
            wanted = f"remote:{remote}" if remote else master
            if _alive(session):
                if made_for == wanted or (remote is None and so.spark_master is None):
                    if is_connect(session):
                        apply_connect_conf(session, conf)  # runtime settings: per pipeline
                    return session
                if is_connect(session) == (remote is not None):
                    session.stop()  # ours, but another master or server is asked for: replace it
                    _OWNED = None
                # else PySpark cannot switch this process between classic Spark and Spark
                # Connect: refused below, with ours left running
            else:
                _OWNED = None
        if remote is not None:
            session = _connect_session(remote, so, conf)
            _OWNED = (session, f"remote:{remote}")
            return session
        if is_remote():  # this process speaks Spark Connect: a session the user opened
            return _users_connect_session(so)
        active = pyspark_compat.running_context()
        if active is not None:  # the user's session: use it, unless the pipeline asks for another master
            if so.spark_master is not None and active.master not in (so.spark_master, master):
                raise InvalidArgumentError(
                    f"a SparkSession with master {active.master!r} is already running in this "
                    f"process, but the pipeline asks for --spark_master={so.spark_master}; stop "
                    "that session first, or drop --spark_master to use it")
            return SparkSession.builder.getOrCreate()
        _check_java()
        startup = [("spark.master", master), ("spark.app.name", so.spark_app_name or "headrace"),
                   *_startup_conf(so, conf)]
        logs.start_jvm(startup, so.spark_log)
        builder = SparkSession.builder
        for k, v in startup:
            builder = builder.config(k, v)
        try:
            session = builder.getOrCreate()
        except Exception as exc:
            raise PipelineExecutionError(
                f"could not start Spark with master {master!r}: {type(exc).__name__}: {exc}. "
                "Check that Java 17 or 21 is installed (java -version) and the master URL is "
                "right") from exc
        if logs.current_log() is None:  # a JVM that was running already: errors only, as ever
            session.sparkContext.setLogLevel("ERROR")
        _OWNED = (session, master)
        return session


# What PySpark's Spark Connect client imports beyond pyspark (pyspark[connect]); checked here
# because PySpark's own check exits the process when it runs under `python -c`.
_CONNECT_MODULES = ("grpc", "grpc_status", "google.rpc", "zstandard", "pandas", "pyarrow")


def connect_client_missing() -> List[str]:
    """The packages of PySpark's Spark Connect client that are not installed (empty: usable)."""
    import importlib.util
    missing = []
    for name in _CONNECT_MODULES:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(name)
    return missing


def _connect_client() -> None:
    """Refuses --spark_remote when PySpark's Spark Connect client cannot load here."""
    missing = connect_client_missing()
    if missing:
        raise PipelineExecutionError(
            f"--spark_remote needs PySpark's Spark Connect client, whose modules "
            f"{', '.join(missing)} are not installed: pip install 'headrace[connect]' (or "
            "'pyspark[connect]')")


def _connect_session(remote: str, so: Any, conf: List[Tuple[str, str]]) -> Any:
    """A new Spark Connect session to `remote` (sc://HOST:PORT), or the session of a Spark
    Connect server started in this process (local[N]); --spark_conf applied (runtime only)."""
    _connect_client()
    from pyspark.sql import SparkSession
    active = pyspark_compat.running_context()
    if active is not None and "SPARK_LOCAL_REMOTE" not in os.environ:
        raise InvalidArgumentError(
            f"a classic SparkSession (master {active.master!r}) is running in this process, and "
            f"PySpark cannot open a Spark Connect session ({remote}) next to it: stop that session "
            "first (spark.stop()), run the pipeline in another process, or drop --spark_remote to "
            "run on that session")
    try:
        if remote.startswith("local"):
            # PySpark starts a Spark Connect server in this process, on a classic Spark that
            # takes static settings as a session headrace starts does.
            _check_java()
            local = effective_master(remote, int(so.spark_task_max_failures))
            startup = _startup_conf(so, conf)
            logs.start_jvm([("spark.master", local), *startup], so.spark_log, connect=True,
                           python_path=worker_python_path())
            builder = SparkSession.builder.remote(local)
            for k, v in startup:
                builder = builder.config(k, v)
            with warnings.catch_warnings():
                # PySpark sets every entry again on the new session and warns for the static
                # ones, which the server has already taken at its start
                warnings.filterwarnings("ignore", message="Failed to set", category=UserWarning)
                session = builder.getOrCreate()
        else:
            session = SparkSession.builder.remote(remote).create()
        session.version  # the first call to the server: fails here if it cannot be reached
    except Exception as exc:
        raise PipelineExecutionError(
            f"could not open a Spark Connect session at {remote}: {type(exc).__name__}: "
            f"{_first_line(exc)}. Check that a Spark Connect server runs there (e.g. "
            "$SPARK_HOME/sbin/start-connect-server.sh) and that the URL is sc://HOST:PORT") from exc
    apply_connect_conf(session, conf)
    return session


def apply_connect_conf(session: Any, conf: List[Tuple[str, str]]) -> None:
    """Sets --spark_conf entries on a Spark Connect session: runtime Spark SQL settings are set;
    any other key is accepted only if the server already has that value (else refused)."""
    for k, v in conf:
        if session.conf.isModifiable(k):
            session.conf.set(k, v)
            continue
        if k == "spark.driver.extraJavaOptions" or session.conf.get(k, None) == v:
            continue  # headrace's log option on a local server; or the server's value already
        raise InvalidArgumentError(
            f"--spark_conf {k}={v}: {k} is not a runtime Spark SQL setting, so it cannot be set "
            "through Spark Connect (the server's Spark started with its own configuration); set it "
            f"where the Spark Connect server starts (start-connect-server.sh --conf {k}={v}), or "
            "drop it")


def _users_connect_session(so: Any) -> Any:
    """The Spark Connect session the user opened in this process (no --spark_remote given)."""
    if so.spark_master is not None:
        raise InvalidArgumentError(
            f"this process uses Spark Connect, so --spark_master={so.spark_master} cannot start "
            "Spark in it (PySpark allows no classic session next to Spark Connect): drop "
            "--spark_master to run on the open Spark Connect session, give --spark_remote, or run "
            "the pipeline in another process")
    from pyspark.sql.connect.session import SparkSession as ConnectSession
    try:
        return ConnectSession.builder.getOrCreate()
    except Exception as exc:
        raise InvalidArgumentError(
            "this process uses Spark Connect but has no open Spark Connect session: give "
            "--spark_remote=sc://HOST:PORT (or set SPARK_REMOTE)") from exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""


def stop_session() -> None:
    """Stops the session headrace created, if any (tests call it before switching masters)."""
    global _OWNED
    with _LOCK:
        if _OWNED is not None:
            _OWNED[0].stop()
            _OWNED = None
