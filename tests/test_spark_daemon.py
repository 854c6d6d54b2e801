"""The Python daemon of headrace's Spark sessions (headrace/runners/spark/worker/daemon.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pyspark
import pytest

from headrace.runners.spark.worker.daemon import drop_spark_archives
from tests.conftest import RUNNERS


def test_the_first_preload_starts_no_thread_and_leaves_pyarrow_and_pandas_to_the_heavy_one():
    # PySpark's daemon forks its workers; a module that starts a thread must not be imported
    # before the fork (the child has only the forking thread): pyarrow and pandas come only with
    # `preload_heavy`, under settings that keep them thread-free (the next test).
    code = ("import os, sys, threading\n"
            "from headrace.runners.spark.worker import daemon as spark_daemon\n"
            "spark_daemon.preload()\n"
            "missing = [m for m in spark_daemon.PRELOAD if m not in sys.modules]\n"
            "assert not missing, missing\n"
            "assert 'pyarrow' not in sys.modules and 'pandas' not in sys.modules\n"
            "assert threading.active_count() == 1\n"
            "if os.path.isdir('/proc/self/task'):\n"
            "    assert len(os.listdir('/proc/self/task')) == 1, os.listdir('/proc/self/task')\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_heavy_modules_are_preloaded_without_a_thread_unless_the_user_set_other_values():
    """pyarrow, numpy and pandas are imported before the fork with the settings under which they
    start no thread (jemalloc's background thread off, one OpenBLAS thread); a user's other
    values leave them to the workers."""
    code = ("import os, sys\n"
            "from headrace.runners.spark.worker import daemon as spark_daemon\n"
            "spark_daemon.preload()\n"
            "done = spark_daemon.preload_heavy()\n"
            "print(done, 'pyarrow' in sys.modules, 'pandas' in sys.modules, spark_daemon.threads())\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("JE_ARROW_MALLOC_CONF", "OPENBLAS_NUM_THREADS", "HEADRACE_DAEMON_LIGHT")}
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                         env=env).stdout.split()
    assert out == ["True", "True", "True", "1"], out
    env["OPENBLAS_NUM_THREADS"] = "4"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                         env=env).stdout.split()
    assert out == ["False", "False", "False", "1"], out


def test_spark_archives_are_dropped_only_when_the_packages_are_installed(tmp_path):
    site = tmp_path / "site"
    for name in ("pyspark", "py4j"):
        (site / name).mkdir(parents=True)
        (site / name / "__init__.py").write_text("")
    archives = [str(tmp_path / "pyspark.zip"), str(tmp_path / "py4j-0.10.9.9-src.zip")]
    other = str(tmp_path / "other")
    assert drop_spark_archives(archives + [other, str(site)]) == [other, str(site)]
    # a Spark distribution without a pip-installed pyspark: its archives are the only copy
    assert drop_spark_archives(archives + [other]) == archives + [other]
    assert drop_spark_archives([other, str(site)]) == [other, str(site)]


def test_dropped_archives_leave_no_finder_for_invalidate_caches_to_reread():
    # The finder Python cached for an archive on the path outlives the path entry; each task's
    # importlib.invalidate_caches() re-read the archive's directory through it.
    code = ("import sys\n"
            "from headrace.runners.spark.worker import daemon as spark_daemon\n"
            "zips = [p for p in sys.path if p.endswith('.zip') and os.path.basename(p)\n"
            "        .startswith(('pyspark', 'py4j'))]\n"
            "assert len(zips) == 2 and all(sys.path_importer_cache.get(z) for z in zips), zips\n"
            "spark_daemon.fix_path()\n"
            "assert not set(zips) & set(sys.path), sys.path\n"
            "assert not set(zips) & set(sys.path_importer_cache), zips\n")
    lib = os.path.join(os.path.dirname(pyspark.__file__), "python", "lib")
    archives = [os.path.join(lib, f) for f in sorted(os.listdir(lib)) if f.endswith(".zip")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(archives + [os.environ.get("PYTHONPATH", "")]))
    subprocess.run([sys.executable, "-c", "import os\n" + code], check=True, env=env)


def test_jars_without_python_files_leave_the_path_with_their_finders(tmp_path):
    # Spark puts its core jar on the workers' path (no Python in it); each task's
    # importlib.invalidate_caches() re-read its directory (55 ms a task for spark-core's).
    import zipfile
    java = tmp_path / "spark-core_2.13-4.3.0.jar"
    with zipfile.ZipFile(java, "w") as z:
        z.writestr("org/apache/spark/SparkContext.class", b"\xca\xfe")
    py = tmp_path / "with-python.jar"
    with zipfile.ZipFile(py, "w") as z:
        z.writestr("pkg/__init__.py", "")
    other = str(tmp_path / "other")
    assert drop_spark_archives([str(java), other, str(py)]) == [other, str(py)]
    code = ("import sys, zipimport\n"
            "from headrace.runners.spark.worker import daemon as spark_daemon\n"
            f"java = {str(java)!r}\n"
            "sys.path.append(java)\n"
            "sys.path_importer_cache[java] = zipimport.zipimporter(java)\n"
            "sys.path_importer_cache[java + '/org'] = zipimport.zipimporter(java + '/org')\n"
            "spark_daemon.fix_path()\n"
            "assert java not in sys.path, sys.path\n"
            "assert not [k for k in sys.path_importer_cache if k.startswith(java)]\n")
    subprocess.run([sys.executable, "-c", code], check=True)


# ---- the bytecode SPARK_HOME (headrace/runners/spark/spark_home.py) ----------------------------

def test_an_archive_with_bytecode_is_imported_from_its_bytecode(tmp_path):
    import zipfile

    from headrace.runners.spark.spark_home import with_bytecode
    plain = tmp_path / "plain.zip"
    with zipfile.ZipFile(plain, "w") as z:
        z.writestr("pkg/__init__.py", "")
        z.writestr("pkg/mod.py", "VALUE = 6 * 7\n\ndef f():\n    return VALUE\n")
        z.writestr("pkg/tests/test_x.py", "X = 1\n")
        z.writestr("pkg/data.txt", "kept\n")
    built = tmp_path / "built.zip"
    with_bytecode(str(plain), str(built))
    with zipfile.ZipFile(built) as z:
        names = set(z.namelist())
        assert z.read("pkg/data.txt") == b"kept\n"
    assert {"pkg/__init__.pyc", "pkg/mod.pyc", "pkg/mod.py", "pkg/tests/test_x.py"} <= names
    assert "pkg/tests/test_x.pyc" not in names
    code = "import pkg.mod; print(pkg.mod.VALUE, pkg.mod.__file__, pkg.mod.f.__code__.co_filename)"
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=str(built)),
                         check=True, capture_output=True, text=True).stdout.split()
    assert out[0] == "42" and out[1].endswith("mod.pyc"), out
    # the code names its file as zipimport does for the source (tracebacks)
    assert out[2] == os.path.join(str(built), "pkg", "mod.py"), out
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=str(plain)),
                         check=True, capture_output=True, text=True).stdout.split()
    assert out[1].endswith("mod.py"), out


def test_the_bytecode_home_links_pysparks_home_and_is_built_once(tmp_path, monkeypatch):
    from headrace.runners.spark import spark_home
    monkeypatch.delenv("SPARK_HOME", raising=False)
    monkeypatch.setenv("HEADRACE_CACHE", str(tmp_path))
    home = spark_home.bytecode_home()
    real = spark_home.pyspark_home()
    assert home is not None and real is not None and home.startswith(str(tmp_path))
    assert os.path.realpath(os.path.join(home, "bin", "spark-submit")) == \
        os.path.realpath(os.path.join(real, "bin", "spark-submit"))
    # each jar is a link to PySpark's, but a signed one is an unsigned copy (class-data sharing)
    jars, real_jars = os.path.join(home, "jars"), os.path.join(real, "jars")
    assert not os.path.islink(jars) and sorted(os.listdir(jars)) == sorted(os.listdir(real_jars))
    copies = [n for n in os.listdir(jars) if not os.path.islink(os.path.join(jars, n))]
    signed = [n for n in os.listdir(real_jars) if spark_home._signed(os.path.join(real_jars, n))]
    assert sorted(copies) == sorted(signed)
    for name in copies:
        assert not spark_home._signed(os.path.join(jars, name)), name
    for name in set(os.listdir(jars)) - set(copies):
        assert os.path.realpath(os.path.join(jars, name)) == \
            os.path.realpath(os.path.join(real_jars, name))
    lib = os.path.join(home, "python", "lib")
    assert sorted(os.listdir(lib)) == sorted(os.listdir(os.path.join(real, "python", "lib")))
    assert not os.path.islink(os.path.join(lib, "pyspark.zip"))
    stamp = os.stat(os.path.join(lib, "pyspark.zip")).st_mtime_ns
    assert spark_home.bytecode_home() == home  # found, not built again
    assert os.stat(os.path.join(lib, "pyspark.zip")).st_mtime_ns == stamp
    assert [p for p in os.listdir(tmp_path) if p.startswith(".building-")] == []
    # a SPARK_HOME the user set is theirs
    monkeypatch.setenv("SPARK_HOME", real)
    assert spark_home.bytecode_home() is None


def test_a_jar_copied_without_signature_keeps_every_other_entry(tmp_path):
    import zipfile

    from headrace.runners.spark import spark_home
    entries = {"META-INF/MANIFEST.MF": b"Manifest-Version: 1.0\n",
               "META-INF/SIGNER.SF": b"sig", "META-INF/SIGNER.RSA": b"block",
               "META-INF/other.dsa": b"block", "META-INF/SIG-X": b"sig",
               "META-INF/maven/x/pom.properties": b"version=1",
               "META-INF/services/a.SF": b"not a signature: not at META-INF's top",
               "org/x/A.class": b"\xca\xfe\xba\xbe" + bytes(range(200))}
    signed, plain, unsigned = tmp_path / "s.jar", tmp_path / "p.jar", tmp_path / "u.jar"
    with zipfile.ZipFile(signed, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in entries.items():
            z.writestr(name, data)
    with zipfile.ZipFile(plain, "w") as z:
        z.writestr("org/x/A.class", b"x")
    assert spark_home._signed(str(signed)) and not spark_home._signed(str(plain))
    assert not spark_home._signed(str(tmp_path / "missing.jar"))
    spark_home.without_signature(str(signed), str(unsigned))
    assert not spark_home._signed(str(unsigned))
    kept = {"META-INF/MANIFEST.MF", "META-INF/maven/x/pom.properties", "META-INF/services/a.SF",
            "org/x/A.class"}
    with zipfile.ZipFile(unsigned) as z:
        assert sorted(z.namelist()) == sorted(kept)
        assert {n: z.read(n) for n in kept} == {n: entries[n] for n in kept}
        assert z.getinfo("org/x/A.class").compress_type == zipfile.ZIP_DEFLATED


def test_a_new_home_removes_the_stale_ones_and_keeps_other_installations(tmp_path):
    from headrace.runners.spark import spark_home
    cache, pysparks = tmp_path / "cache", tmp_path / "venvs"
    for venv in ("a", "b", "gone"):
        (pysparks / venv / "python" / "lib").mkdir(parents=True)
        (pysparks / venv / "python" / "lib" / "pyspark.zip").write_bytes(b"")
    built = {"old-of-a": "a", "new-of-a": "a", "of-b": "b", "of-gone": "gone"}
    for name, venv in built.items():
        (cache / f"spark-home-{name}").mkdir(parents=True)
        (cache / f"spark-home-{name}" / "headrace-complete").write_text(
            f"built from {pysparks / venv}\n")
    (cache / "spark-home-being-built").mkdir()   # no completion mark: left alone
    (cache / "other").mkdir()
    (pysparks / "gone" / "python" / "lib" / "pyspark.zip").unlink()
    spark_home.prune(str(pysparks / "a"), str(cache / "spark-home-new-of-a"))
    assert sorted(os.listdir(cache)) == ["other", "spark-home-being-built", "spark-home-new-of-a",
                                         "spark-home-of-b"]


def test_an_unwritable_cache_leaves_spark_its_own_home(tmp_path, monkeypatch):
    from headrace.runners.spark import spark_home
    monkeypatch.delenv("SPARK_HOME", raising=False)
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("HEADRACE_CACHE", str(blocker / "cache"))
    assert spark_home.bytecode_home() is None


@pytest.mark.skipif("spark-local" not in RUNNERS, reason="Spark runners not selected")
def test_the_jvm_headrace_starts_gives_its_python_processes_the_bytecode_archives():
    import headrace as beam
    from headrace.options.pipeline_options import PipelineOptions
    from headrace.runners.spark import spark_home
    if os.environ.get("SPARK_HOME"):
        pytest.skip("SPARK_HOME is set: Spark runs on the user's home")
    with beam.Pipeline(options=PipelineOptions(runner="SparkRunner")) as p:
        p | beam.Create([1, 2]) | beam.Map(lambda x: x)
    from pyspark import SparkContext
    jvm_home = SparkContext._jvm.java.lang.System.getenv("SPARK_HOME")
    assert jvm_home == spark_home.bytecode_home(), jvm_home
    path = SparkContext._jvm.org.apache.spark.api.python.PythonUtils.sparkPythonPath()
    assert os.path.join(jvm_home, "python", "lib", "pyspark.zip") in path.split(os.pathsep)


@pytest.mark.skipif("spark-local" not in RUNNERS, reason="Spark runners not selected")
def test_a_worker_leaves_the_preloaded_modules_frozen_and_collects_young_garbage_after_a_task():
    """PySpark's reused worker runs a full `gc.collect()` after each task (tens of ms with pandas
    imported); headrace's daemon freezes what it preloaded and makes that a young collection."""
    import headrace as beam
    from headrace.options.pipeline_options import PipelineOptions
    from headrace.testing.util import assert_that, equal_to
    from tests.conftest import RUNNER_CONFIGS

    def probe(_):
        import gc
        daemon = sys.modules.get("pyspark.daemon")
        return gc.get_freeze_count() > 1000, type(getattr(daemon, "gc", None)).__name__

    name, extra = RUNNER_CONFIGS["spark-local"]
    with beam.Pipeline(runner=name, options=PipelineOptions(**extra)) as p:
        assert_that(p | beam.Create([1, 2]) | beam.Map(probe),
                    equal_to([(True, "YoungCollector")] * 2))


def _parent_pids_fn():
    """A CombineFn whose output is the parent pids of the processes that ran its steps and
    made its inputs (each input is its maker's parent pid)."""
    import headrace as beam

    class ParentPids(beam.CombineFn):
        def create_accumulator(self):
            return frozenset()

        def add_input(self, acc, pid):
            return acc | {pid, os.getppid()}

        def merge_accumulators(self, accs):
            return frozenset().union(*accs) | {os.getppid()}

        def extract_output(self, acc):
            return sorted(acc | {os.getppid()})

    return ParentPids()


@pytest.mark.skipif("spark-local" not in RUNNERS, reason="Spark runners not selected")
def test_the_stateful_operators_workers_fork_from_the_daemon_of_the_other_workers():
    """Spark keeps a daemon per set of worker environment variables; its SQL runners add
    SPARK_SIMPLIFIED_TRACEBACK and `transformWithState`'s did not, so the stateful operator's
    workers came from a second daemon, started in the first micro-batch. In a session headrace
    starts, every worker has it: one daemon forks them all."""
    import headrace as beam
    from headrace.options.pipeline_options import PipelineOptions
    from headrace.testing.util import assert_that, equal_to
    from tests.conftest import RUNNER_CONFIGS

    name, extra = RUNNER_CONFIGS["spark-local"]
    with beam.Pipeline(runner=name, options=PipelineOptions(streaming=True, **extra)) as p:
        pids = (p | beam.Create(range(40))
                | beam.Map(lambda i: (i % 2, os.getppid()))
                | beam.CombinePerKey(_parent_pids_fn())
                | beam.Map(lambda kv: len(kv[1])))
        assert_that(pids, equal_to([1, 1]))
