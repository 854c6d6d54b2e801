"""A class-data-sharing archive of Spark's classes for the driver JVM that headrace starts.

A JVM that starts Spark loads, parses and verifies thousands of classes from Spark's jars.
Java's AppCDS (application class-data sharing; JEP 350's dynamic archives, in every Java 17 and
21) keeps those classes, already parsed and verified, in a file that a later JVM maps into
memory: a fresh process's Spark start and first small job on `local[2]` took 4.1-4.3 s with one
and 7.1-7.2 s without (`benchmarks/README.md`, "A JVM class archive", and "Spark Connect's
classes in the archive").

`headrace jvm-archive` (or `build()`) makes the archive: it runs a small batch pipeline and a
small streaming pipeline on Spark `local[2]` in a child process (`headrace.cli`'s workload),
then a small bounded pipeline over a Spark Connect server started in the same JVM (as
`--spark_remote=local[N]` starts one; skipped without PySpark's Spark Connect client), and that
JVM writes the classes it loaded to a file when it exits (`-XX:ArchiveClassesAtExit`);
the file is renamed into headrace's cache only after that JVM exited normally, so no JVM ever
maps a partial one (a truncated archive crashes the JVM that maps it). It is about 220 MB and
is made once per Java installation, PySpark version and Spark home (its key); building took
31-62 s here. The Spark Connect run adds the classes a Spark Connect server's first requests
load (gRPC, its planner, Spark SQL's analyser and planner, Arrow): a pipeline's first job over
a server that `--spark_remote=local[2]` starts took 0.2-0.7 s less with them; the run ends
with the request PySpark's client makes when its process exits (dropping the session's Spark ML
cache, for which the server loads about 490 classes of Spark ML). The JVM archives
no class of a signed jar; the bytecode SPARK_HOME (`spark_home`) holds unsigned copies of the
signed ones (Janino, Spark SQL's code generator), so their classes are archived too.

When the archive for the current Java and PySpark exists, headrace starts its driver JVM with
it (`-XX:SharedArchiveFile`); `HEADRACE_JVM_ARCHIVE=off` starts it without. A JVM whose class
path differs from the archive's (`spark.driver.extraClassPath`) or whose Java was updated in
place uses no archive and starts as it would have: the JVM checks the archive's class path and
build, and its messages about that are turned off (`-Xlog:cds*=off`) since they would appear
on the terminal. Only the driver uses it: executors of a cluster start with other class paths.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from importlib import metadata
from typing import List, Optional

from headrace.runners.spark import spark_home

ENV = "HEADRACE_JVM_ARCHIVE"
"""Set to `off` to start the driver JVM without the archive."""

_FORMAT = "3"  # of the build's workload and options; in the key (2: a Spark Connect run too;
#                3: the bytecode home's unsigned jars, whose classes it now holds, and the Spark
#                Connect client's exit request)
QUIET = "-Xlog:cds*=off"
"""The JVM option that silences its messages about an archive it cannot use (class path, build)."""


def java_executable() -> Optional[str]:
    """The java executable Spark's launcher runs (`$JAVA_HOME/bin/java` when JAVA_HOME is set,
    else the one on the PATH), its links resolved; None when there is none."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.path.exists(java):
        return None
    return os.path.realpath(java)


def archive_path() -> Optional[str]:
    """Where the archive for the current Java, PySpark and Spark home is (or would be); None
    when there is no Java or no PySpark."""
    java = java_executable()
    if java is None:
        return None
    try:
        pyspark = metadata.version("pyspark")
    except metadata.PackageNotFoundError:
        return None
    home = os.environ.get("SPARK_HOME") or spark_home.pyspark_home() or ""
    stamp = [_FORMAT, java, pyspark, home]
    release = os.path.join(os.path.dirname(os.path.dirname(java)), "release")
    # a reinstalled PySpark gets a new bytecode home (spark_home), the driver's class path
    for path in (java, release, os.path.join(home, "jars"),
                 os.path.join(home, "python", "lib", "pyspark.zip")):
        try:
            st = os.stat(path)
            stamp.append(f"{path}:{st.st_size}:{st.st_mtime_ns}")
        except OSError:
            pass
    key = hashlib.sha256("|".join(stamp).encode()).hexdigest()[:16]
    return os.path.join(spark_home.cache_root(), f"jvm-archive-{pyspark}-{key}.jsa")


def java_options() -> str:
    """The driver JVM's options for the archive: empty when it is off or not built."""
    if os.environ.get(ENV, "").lower() in ("off", "0", "false", "no"):
        return ""
    path = archive_path()
    if path is None or not os.path.isfile(path):
        return ""
    return f"-XX:SharedArchiveFile={path} {QUIET}"


def build(force: bool = False) -> str:
    """Builds the archive (unless it exists, or with `force`) and returns its path; one process
    builds it at a time, the others wait for it. Raises RuntimeError when the build fails."""
    path = archive_path()
    if path is None:
        raise RuntimeError("no Java or no PySpark found: install Java 17 or 21 "
                           "(apt-get install openjdk-17-jre-headless) and headrace's Spark extra")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.isfile(path) and not force:
            return path
        tmp = f"{path}.{os.getpid()}.building"
        env = dict(os.environ, **{ENV: "off"})
        env.pop("PYSPARK_GATEWAY_PORT", None)
        child = subprocess.run(
            [sys.executable, "-m", "headrace.cli", "jvm-archive", "--dump", tmp],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900)
        if child.returncode != 0 or not os.path.isfile(tmp):
            _remove(tmp)
            raise RuntimeError(f"building the JVM class archive failed (exit {child.returncode})"
                               f":\n{child.stdout[-3000:]}")
        os.replace(tmp, path)
        _prune(path)
    return path


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


def _prune(kept: str) -> None:
    """Removes the cache's other archives of the same PySpark version (an older Java or Spark
    home) and leftovers of builds that died."""
    parent, name = os.path.split(kept)
    prefix = name.rsplit("-", 1)[0] + "-"
    for other in os.listdir(parent):
        if other.startswith(prefix) and other not in (name, name + ".lock"):
            _remove(os.path.join(parent, other))


def main(argv: Optional[List[str]] = None) -> int:
    """`headrace jvm-archive [--force]`: builds the archive and says where it is."""
    args = list(sys.argv[1:] if argv is None else argv)
    force = "--force" in args
    path = archive_path()
    if path is not None and os.path.isfile(path) and not force:
        print(f"headrace: the JVM class archive exists: {path}")
        return 0
    t0 = time.monotonic()
    try:
        path = build(force=force)
    except RuntimeError as exc:
        print(f"headrace: {exc}", file=sys.stderr)
        return 1
    size = os.path.getsize(path) / 1e6
    print(f"headrace: built the JVM class archive in {time.monotonic() - t0:.0f} s: {path} "
          f"({size:.0f} MB); Spark drivers headrace starts now use it ({ENV}=off: they do not)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
