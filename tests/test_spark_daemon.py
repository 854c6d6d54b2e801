"""The Python daemon of headrace's Spark sessions (headrace/runners/spark/worker/daemon.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pyspark

from headrace.runners.spark.worker.daemon import drop_spark_archives


def test_preloading_starts_no_thread_and_leaves_pyarrow_and_pandas_to_the_workers():
    # PySpark's daemon forks its workers; a module that starts a thread must not be imported
    # before the fork (the child has only the forking thread).
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
