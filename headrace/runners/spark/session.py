"""The SparkSession the Spark runner uses: found, or created with settings a newcomer needs.

When no session is given, the runner creates one from `SparkRunnerOptions`: Spark's local mode
by default (`local[*]`), the Python workers running this interpreter (`PYSPARK_PYTHON`), this
process's import path on every worker (so DoFns defined in importable modules deserialise), and
task retries also in local mode (`local[N]` becomes `local[N,F]`, F = --spark_task_max_failures).
A session the runner created is reused by later pipelines with the same master and replaced when
a pipeline asks for another master; a session created by the user is used as it is.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import threading
from typing import Any, List, Optional, Tuple

from headrace.errors import InvalidArgumentError, PipelineExecutionError
from headrace.options.pipeline_options import SparkRunnerOptions
from headrace.runners.spark import pyspark_compat

_LOCK = threading.Lock()
_OWNED: Optional[Tuple[Any, str]] = None  # (the session headrace created, its requested master)
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


def worker_python_path() -> str:
    """This process's import path, for the Python workers (they must import the same modules)."""
    seen = []
    for p in [os.getcwd()] + sys.path:
        p = os.path.abspath(p or os.getcwd())
        if os.path.isdir(p) and p not in seen:
            seen.append(p)
    return os.pathsep.join(seen)


def _check_java() -> None:
    home = os.environ.get("JAVA_HOME")
    if home and os.path.exists(os.path.join(home, "bin", "java")):
        return
    if shutil.which("java"):
        return
    raise PipelineExecutionError(
        "the Spark runner needs a Java 17 or 21 runtime and none was found: install one (on "
        "Debian/Ubuntu: apt-get install openjdk-17-jre-headless) or set JAVA_HOME to it")


# Spark's log configuration for sessions headrace starts (see the file's comments).
_LOG_OPTION = "-Dlog4j2.configurationFile=" + os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                          "log4j2.properties")


def get_session(options: Any) -> Any:
    """The SparkSession for a pipeline with these options (created if need be)."""
    global _OWNED
    so = options.view_as(SparkRunnerOptions)
    master = effective_master(so.spark_master, int(so.spark_task_max_failures))
    conf = parse_conf(so.spark_conf)
    from pyspark.sql import SparkSession

    with _LOCK:
        active = pyspark_compat.running_context()
        if active is not None:
            if _OWNED is not None and _OWNED[0].sparkContext is active:
                if so.spark_master is None or _OWNED[1] == master:
                    return _OWNED[0]
                _OWNED[0].stop()  # ours, but another master is asked for: replace it
                _OWNED = None
            else:  # the user's session: use it, unless the pipeline asks for another master
                if so.spark_master is not None and active.master not in (so.spark_master, master):
                    raise InvalidArgumentError(
                        f"a SparkSession with master {active.master!r} is already running in this "
                        f"process, but the pipeline asks for --spark_master={so.spark_master}; stop "
                        "that session first, or drop --spark_master to use it")
                return SparkSession.builder.getOrCreate()
        _check_java()
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        builder = (SparkSession.builder.master(master).appName(so.spark_app_name or "headrace")
                   .config("spark.ui.showConsoleProgress", "false")
                   .config("spark.executorEnv.PYTHONPATH", worker_python_path())
                   .config("spark.executorEnv.PYSPARK_PYTHON", os.environ["PYSPARK_PYTHON"])
                   .config("spark.task.maxFailures", str(int(so.spark_task_max_failures))))
        java_options = _LOG_OPTION
        for k, v in conf:
            if k == "spark.driver.extraJavaOptions":
                java_options = v if "log4j2.configurationFile" in v else f"{_LOG_OPTION} {v}"
            else:
                builder = builder.config(k, v)
        builder = builder.config("spark.driver.extraJavaOptions", java_options)
        try:
            session = builder.getOrCreate()
        except Exception as exc:
            raise PipelineExecutionError(
                f"could not start Spark with master {master!r}: {type(exc).__name__}: {exc}. "
                "Check that Java 17 or 21 is installed (java -version) and the master URL is "
                "right") from exc
        session.sparkContext.setLogLevel("ERROR")
        _OWNED = (session, master)
        return session


def stop_session() -> None:
    """Stops the session headrace created, if any (tests call it before switching masters)."""
    global _OWNED
    with _LOCK:
        if _OWNED is not None:
            _OWNED[0].stop()
            _OWNED = None
