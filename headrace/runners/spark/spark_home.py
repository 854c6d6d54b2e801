"""A SPARK_HOME whose `pyspark.zip` carries bytecode, for the JVM that headrace starts.

Spark puts `$SPARK_HOME/python/lib/pyspark.zip` first on the import path of every Python
process it starts. Python keeps no bytecode cache for modules in an archive, so each of them
compiles PySpark's modules from source. headrace's worker daemon (`worker/daemon.py`) drops the
archive from its own workers' path, but Spark starts other Python processes itself, outside any
daemon of headrace's: the driver-side runner of a Python streaming source, one
`transform_with_state_driver_worker` per stateful operator of a query, and PySpark's own daemon
for the Python data source workers (`create_data_source`, `plan_data_source_read`). Each paid
about 0.5 s of CPU here to compile what it imports (3-4 s of wall clock on a loaded machine,
enough to miss Spark's 10 s connect-back timeout of the streaming source runner).

When SPARK_HOME is not set (PySpark installed by pip: its package directory is Spark's home),
headrace starts its JVM with SPARK_HOME set to a directory in the user's cache that links every
entry of PySpark's home but `python/lib/pyspark.zip` and `py4j-*.zip`, which it holds as copies of
those archives with each module's bytecode beside it (unchecked hash-based `.pyc` files, which `zipimport`
prefers to the source). It is built once per PySpark version and Python version. A SPARK_HOME
the user set is used as it is, and so is PySpark's home when the cache cannot be written.

Its `jars` directory links each of PySpark's jars too, but holds a copy of each signed one
(Janino and its `commons-compiler`, Spark SQL's code generator, are the only ones in PySpark 4)
without its signature files: the JVM's class-data sharing (`jvm_archive`) skips every class of
a signed jar ("Signed JAR"), so a Spark Connect server's first query, which compiles generated
code, loaded Janino's classes (356 in a small pipeline's run) from the jars; with the
copies they come from the archive.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import marshal
import os
import shutil
import sys
import tempfile
import zipfile
from typing import Any, List, Optional

_LOG = logging.getLogger(__name__)
_DONE = "headrace-complete"  # written last into a finished home: _BUILT_FROM and its source
_BUILT_FROM = "built from "
_MAGIC = importlib.util.MAGIC_NUMBER
_FORMAT = "3"  # of what _build makes (2: the code names its file in the archive; 3: unsigned
#                 copies of signed jars); in the key


def cache_root() -> str:
    """Where headrace keeps what it builds for itself ($HEADRACE_CACHE, else the XDG cache)."""
    explicit = os.environ.get("HEADRACE_CACHE")
    if explicit:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "headrace")


def pyspark_home() -> Optional[str]:
    """PySpark's own Spark home when it is a pip-installed PySpark (its package directory, with
    `python/lib/pyspark.zip`), else None."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        return None
    home = os.path.realpath(list(spec.submodule_search_locations)[0])
    if os.path.isfile(os.path.join(home, "python", "lib", "pyspark.zip")) and \
            os.path.isdir(os.path.join(home, "jars")):
        return home
    return None


def bytecode_home() -> Optional[str]:
    """The SPARK_HOME to start headrace's JVM with (see the module), or None for Spark's own
    choice: SPARK_HOME set by the user, PySpark not pip-installed, or the cache not writable."""
    if os.environ.get("SPARK_HOME"):
        return None
    home = pyspark_home()
    if home is None:
        return None
    lib = os.path.join(home, "python", "lib")
    stamp = [home, _MAGIC.hex(), _FORMAT]
    for name in sorted(_archives(lib)):
        st = os.stat(os.path.join(lib, name))
        stamp.append(f"{name}:{st.st_size}:{st.st_mtime_ns}")
    key = hashlib.sha256("|".join(stamp).encode()).hexdigest()
    target = os.path.join(cache_root(), f"spark-home-{sys.implementation.cache_tag}-{key[:16]}")
    if os.path.exists(os.path.join(target, _DONE)):
        return target
    try:
        _build(home, target)
    except OSError as exc:
        _LOG.info("headrace: no bytecode SPARK_HOME (%s); Spark's Python processes compile "
                  "PySpark from %s", exc, lib)
        return None
    prune(home, target)
    return target


def prune(home: str, kept: str) -> None:
    """Removes the homes in the cache that no process will use again: those built from `home`
    before its archives changed (all but `kept`), and those whose PySpark is gone (a removed
    virtualenv). Homes of other PySpark installations that still exist are left alone."""
    parent = os.path.dirname(kept)
    for name in os.listdir(parent):
        path = os.path.join(parent, name)
        if not name.startswith("spark-home-") or path == kept:
            continue
        try:
            with open(os.path.join(path, _DONE)) as f:
                source = f.read().strip().removeprefix(_BUILT_FROM)
        except OSError:
            continue  # being built, or not one of ours
        if source == home or not os.path.isfile(os.path.join(source, "python", "lib",
                                                                 "pyspark.zip")):
            shutil.rmtree(path, ignore_errors=True)


def _build(home: str, target: str) -> None:
    """Builds the home at `target` (in a temporary directory beside it, then renamed, so a
    process that finds `target` finds it whole)."""
    parent = os.path.dirname(target)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".building-", dir=parent)
    try:
        lib = os.path.join(home, "python", "lib")
        archives = _archives(lib)
        jars = os.path.join(home, "jars")
        signed = [n for n in os.listdir(jars) if n.endswith(".jar") and _signed(os.path.join(jars, n))]
        _link_all_but(home, tmp, ["python", "jars"])
        _link_all_but(jars, os.path.join(tmp, "jars"), signed)
        for name in signed:   # class-data sharing skips a signed jar's classes
            without_signature(os.path.join(jars, name), os.path.join(tmp, "jars", name))
        _link_all_but(os.path.join(home, "python"), os.path.join(tmp, "python"), ["lib"])
        _link_all_but(lib, os.path.join(tmp, "python", "lib"), archives)
        for name in archives:   # the modules' paths as they will be, under `target`
            with_bytecode(os.path.join(lib, name), os.path.join(tmp, "python", "lib", name),
                          os.path.join(target, "python", "lib", name))
        with open(os.path.join(tmp, _DONE), "w") as f:
            f.write(f"{_BUILT_FROM}{home}\n")
        try:
            os.rename(tmp, target)
        except OSError:
            if not os.path.exists(os.path.join(target, _DONE)):
                raise  # else another process built it first: use theirs
    finally:
        if os.path.exists(tmp):
            shutil.rmtree(tmp, ignore_errors=True)


def _link_all_but(source: str, dest: str, left_out: List[str]) -> None:
    """Makes `dest` with a link to each entry of `source` but those `left_out`."""
    os.makedirs(dest, exist_ok=True)
    for name in os.listdir(source):
        if name not in left_out:
            os.symlink(os.path.join(source, name), os.path.join(dest, name))


def _is_signature(entry: str) -> bool:
    """Whether a jar entry is a signature file (the jar specification's `META-INF/*.SF`, its
    signature block files and `SIG-*`, directly in `META-INF`)."""
    directory, _, base = entry.upper().rpartition("/")
    return directory == "META-INF" and (base.endswith((".SF", ".RSA", ".DSA", ".EC"))
                                        or base.startswith("SIG-"))


def _signed(jar: str) -> bool:
    """Whether the jar at `jar` carries a signature (unreadable: treated as not signed)."""
    try:
        with zipfile.ZipFile(jar) as z:
            return any(_is_signature(n) for n in z.namelist())
    except (OSError, zipfile.BadZipFile):
        return False


def without_signature(source: str, dest: str) -> None:
    """Copies the jar `source` to `dest` without its signature files (entries and their
    compression kept), so the JVM treats it as unsigned."""
    with zipfile.ZipFile(source) as zin, zipfile.ZipFile(dest, "w") as zout:
        for info in zin.infolist():
            if not _is_signature(info.filename):
                zout.writestr(info, zin.read(info))


def _archives(lib: str) -> List[str]:
    """The Python archives Spark puts on its Python processes' path (pyspark's and py4j's)."""
    return [n for n in os.listdir(lib) if n.endswith(".zip") and n.startswith(("pyspark", "py4j"))]


def with_bytecode(source: str, dest: str, final: Optional[str] = None) -> None:
    """Copies the zip `source` to `dest`, adding beside each module (not PySpark's tests) its
    bytecode for this Python, as an unchecked hash-based `.pyc`; its code names the module's
    file as zipimport would (`final`, where the archive will be, default `dest`, then the
    module's path in it), for tracebacks."""
    where = final or dest
    with zipfile.ZipFile(source) as zin, \
            zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zout:
        for info in zin.infolist():
            data = zin.read(info)
            zout.writestr(info, data)
            name = info.filename
            if not name.endswith(".py") or "/tests/" in name or "/testing/" in name:
                continue
            try:
                code = compile(data, os.path.join(where, name), "exec", dont_inherit=True)
            except (SyntaxError, ValueError):
                continue  # zipimport compiles it itself, and reports the error, if imported
            pyc = zipfile.ZipInfo(name[:-3] + ".pyc", info.date_time)
            pyc.compress_type = zipfile.ZIP_DEFLATED
            zout.writestr(pyc, _unchecked_pyc(code, data))


def _unchecked_pyc(code: Any, source: bytes) -> bytes:
    """A `.pyc` of `code` (PEP 552: hash-based, source not checked)."""
    flags = (0b01).to_bytes(4, "little")
    return _MAGIC + flags + importlib.util.source_hash(source) + marshal.dumps(code)
