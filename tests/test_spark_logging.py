"""What a user sees on the terminal when headrace starts Spark: headrace's lines only. Spark's
own output (its log, its JVM's warnings, what its Python workers print) goes to a log file,
named once; a failing step prints headrace's error, not one Java-wrapped Python traceback per
task attempt from Spark's Executor; an error Spark logs shows as one headrace line."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import RUNNERS

pytestmark = pytest.mark.skipif("spark-local" not in RUNNERS, reason="Spark runners not selected")

LOG_LINE = re.compile(r"^headrace: Spark's log \(its warnings, and what its Python workers print\) "
                      r"is (\S+)$")

SCRIPT = textwrap.dedent("""
    import headrace as beam
    from headrace.options.pipeline_options import PipelineOptions

    def bad(x):
        if x == 3:
            raise ValueError("boom")
        return x

    try:
        with beam.Pipeline(options=PipelineOptions(
                runner="SparkRunner", spark_master="local[2]", max_bundle_attempts=1,
                spark_conf=["spark.ui.enabled=false"] + EXTRA)) as p:
            p | beam.Create(range(10)) | "Checked" >> beam.Map(bad)
    except beam.HeadraceError as exc:
        print("RAISED", type(exc).__name__, exc)

    # an error Spark logs (as when a component of it fails): one line on the terminal
    from pyspark import SparkContext
    logger = SparkContext._jvm.org.apache.logging.log4j.LogManager.getLogger("org.apache.spark.Probe")
    logger.error("the probe failed\\nits second line")
    logger.warn("a probe warning")
    # RocksDB's own lines, as Spark's state store logs them: the log only
    logger.error("StateStoreProviderId[ probe ]: [NativeRocksDB-3] [/version_set.cc:1] closing")
""")


def _env(tmp_path):
    """The environment of a child run: this Python on the workers, temporary files in tmp_path."""
    return dict(os.environ, PYSPARK_PYTHON=sys.executable, TMPDIR=str(tmp_path))


def _spark_log(stderr: str) -> str:
    """The log file the run named on standard error (exactly once)."""
    found = [m.group(1) for m in map(LOG_LINE.match, stderr.splitlines()) if m]
    assert len(found) == 1, stderr
    assert os.path.isfile(found[0]), found[0]
    with open(found[0], errors="replace") as fh:
        return fh.read()


@pytest.mark.parametrize("extra", [[], ["spark.driver.extraJavaOptions=-Dheadrace.test=1"]])
def test_a_failing_step_prints_headraces_error_not_sparks_task_tracebacks(extra, tmp_path):
    """The error names the step; Spark's Executor/TaskSetManager reports of the failed task go to
    Spark's log; so do Spark's warnings; an error Spark logs shows as one headrace line."""
    proc = subprocess.run([sys.executable, "-c", f"EXTRA = {extra!r}\n" + SCRIPT], capture_output=True,
                          text=True, timeout=300, env=_env(tmp_path))
    assert "RAISED PipelineExecutionError step 'Checked' failed" in proc.stdout, proc.stderr[-3000:]
    assert "ValueError: boom" in proc.stdout
    assert "Exception in task" not in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.splitlines()) < 10, proc.stderr
    assert all(line.startswith("headrace: ") for line in proc.stderr.splitlines()), proc.stderr
    assert ("headrace: Spark error in Probe: the probe failed (details in Spark's log)"
            in proc.stderr.splitlines()), proc.stderr
    log = _spark_log(proc.stderr)
    assert "Exception in task" in log and "ValueError: boom" in log
    assert "ERROR Probe: the probe failed\nits second line" in log
    assert "WARN Probe: a probe warning" in log and "a probe warning" not in proc.stderr
    assert "[NativeRocksDB-3] [/version_set.cc:1] closing" in log and "NativeRocksDB" not in proc.stderr


def test_spark_that_cannot_start_is_explained_with_the_end_of_its_log(tmp_path):
    """The JVM's own complaint (here: a bad heap size) went to the log; the error quotes it."""
    script = textwrap.dedent("""
        import headrace as beam
        from headrace.options.pipeline_options import PipelineOptions
        try:
            with beam.Pipeline(options=PipelineOptions(
                    runner="SparkRunner", spark_master="local[2]",
                    spark_conf=["spark.driver.memory=bogus"])) as p:
                p | beam.Create([1])
        except beam.HeadraceError as exc:
            print("RAISED", type(exc).__name__, exc)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300, env=_env(tmp_path))
    assert "RAISED PipelineExecutionError could not start Spark" in proc.stdout, proc.stderr
    assert "Invalid maximum heap size: -Xmxbogus" in proc.stdout
    assert proc.stderr == "", proc.stderr


def _demo_report(stdout: str) -> bool:
    """Whether stdout is the streaming demo's report: its title, then indented lines."""
    lines = stdout.splitlines()
    return (bool(lines) and lines[0] == "headrace sessions & billing, streaming (SparkRunner, --source files)"
            and all(line.startswith("  ") for line in lines[1:]))


def test_the_streaming_demo_prints_only_headraces_lines(tmp_path):
    """`./dev demo --streaming`: stdout holds the report, stderr headrace's two lines (Spark's
    log, here --spark_log's file, and the query's checkpoint); Spark's lines, its Python
    workers' included, are in the log. The report's numbers are the late-panes check of
    tests/test_example_job.py on spark-local (the same arguments; one Spark run for both)."""
    from headrace.examples import sessions_billing as sb
    from tests.test_example_job import LATE_DEMO, too_late_drops
    proc = subprocess.run(
        [sys.executable, "-m", "headrace.examples.sessions_billing", *LATE_DEMO,
         f"--workdir={tmp_path / 'work'}", "--spark_master=local[2]",
         "--spark_conf=spark.ui.enabled=false", "--state_partitions=2",
         f"--spark_log={tmp_path / 'logs' / 'spark.log'}"],
        capture_output=True, text=True, timeout=600, env=_env(tmp_path))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert _demo_report(proc.stdout), proc.stdout
    others = [line for line in proc.stderr.splitlines()
              if not LOG_LINE.match(line) and not line.startswith("headrace: streaming query checkpoint at ")]
    assert others == [], proc.stderr
    assert f"is {tmp_path / 'logs' / 'spark.log'}" in proc.stderr  # --spark_log, its directory made
    log = _spark_log(proc.stderr)
    # what PySpark's streaming workers print (log4j's lines reach the log too: the test above)
    assert "TransformWithStateInPandas" in log
    # the report: late and too-late lines, late panes, exactly the too-late elements dropped,
    # the revenue of the windows' last panes equal to the log's without its too-late lines
    report = proc.stdout
    late = re.search(r"^  input +[\d,]+ lines arrived in 12 files in .*; (\d+) lines came 2 hours "
                     r"late, (\d+) 6 hours late$", report, re.M)
    assert late and int(late.group(1)) > 0 and int(late.group(2)) > 0, report
    sessions = re.search(r"^  panes +sessions: [\d,]+ early, [\d,]+ on time, ([\d,]+) late$",
                         report, re.M)
    revenue = re.search(r"^ +hourly revenue: [\d,]+ early, ([\d,]+) on time, [\d,]+ late$",
                        report, re.M)
    assert sessions and int(sessions.group(1).replace(",", "")) > 0, report
    assert revenue and int(revenue.group(1).replace(",", "")) > 0, report
    dropped = re.search(r"^  dropped +(\d+) late elements", report, re.M)
    assert dropped and int(dropped.group(1)) == too_late_drops(sb.parse_args(LATE_DEMO)[0]), report
    malformed = re.search(r"^  malformed +(\d+) lines went to the dead-letter output$", report, re.M)
    assert malformed and int(malformed.group(1)) == len(sb.MALFORMED_LINES), report
    total = re.search(r"^  revenue +\$([\d,.]+) in the windows' last panes; the log without its "
                      r"too-late lines: \$([\d,.]+) \(equal\)$", report, re.M)
    assert total and total.group(1) == total.group(2) and total.group(1) != "0.00", report


@pytest.fixture
def no_java_env_options(monkeypatch):
    """No JDK_JAVA_OPTIONS / JAVA_TOOL_OPTIONS (the suite sets the first, with its JIT choice)."""
    from headrace.runners.spark import logs
    for var in logs.JAVA_ENV_OPTIONS:
        monkeypatch.delenv(var, raising=False)


@pytest.mark.usefixtures("no_java_env_options")
def test_headraces_log_configuration_comes_first_unless_the_user_names_one(monkeypatch):
    """--spark_conf spark.driver.extraJavaOptions keeps headrace's log4j configuration, unless it
    names a log4j configuration of its own."""
    from headrace.runners.spark import jvm_archive, logs
    monkeypatch.setenv(jvm_archive.ENV, "off")
    jit = f"{logs.JIT_OPTION} {logs.THRESHOLD_OPTION}"
    assert logs.java_options([]) == f"{logs.LOG4J_OPTION} {jit}"
    assert (logs.java_options([("spark.driver.extraJavaOptions", "-Da=1")])
            == f"{logs.LOG4J_OPTION} {jit} -Da=1")
    own = "-Dlog4j2.configurationFile=/etc/mine.properties"
    assert logs.java_options([("spark.driver.extraJavaOptions", own)]) == f"{jit} {own}"


@pytest.mark.usefixtures("no_java_env_options")
def test_the_driver_runs_c1_alone_unless_the_user_chooses_the_tiers(monkeypatch):
    """headrace's driver JVM compiles with C1 alone (`JIT_OPTION`), its thresholds scaled
    (`THRESHOLD_OPTION`); options of the user's that choose the compilation tiers are kept as
    given, without either; options that scale the thresholds, without the scaling."""
    from headrace.runners.spark import jvm_archive, logs
    monkeypatch.setenv(jvm_archive.ENV, "off")
    assert logs.JIT_OPTION == "-XX:TieredStopAtLevel=1"
    assert logs.THRESHOLD_OPTION == "-XX:CompileThresholdScaling=0.3"
    assert logs.java_options([]).split()[-2:] == [logs.JIT_OPTION, logs.THRESHOLD_OPTION]
    own = "-XX:CompileThresholdScaling=0.5"
    assert (logs.java_options([("spark.driver.extraJavaOptions", own)])
            == f"{logs.LOG4J_OPTION} {logs.JIT_OPTION} {own}")
    for own in ("-XX:TieredStopAtLevel=4", "-XX:-TieredCompilation", "-Da=1 -XX:TieredStopAtLevel=3"):
        assert logs.java_options([("spark.driver.extraJavaOptions", own)]) == f"{logs.LOG4J_OPTION} {own}"
    # options every java takes come before headrace's on its command line: a choice there is kept
    for var in logs.JAVA_ENV_OPTIONS:
        monkeypatch.setenv(var, "-XX:TieredStopAtLevel=4")
        assert logs.java_options([]) == logs.LOG4J_OPTION
        monkeypatch.delenv(var)


@pytest.mark.usefixtures("no_java_env_options")
def test_the_jvm_class_archive_is_used_once_built_unless_turned_off(monkeypatch, tmp_path):
    """A built archive (in headrace's cache, keyed by Java and PySpark) goes into the driver's
    options with the JVM's messages about it turned off; HEADRACE_JVM_ARCHIVE=off, an option of
    the user's naming an archive, or no archive built: not."""
    from headrace.runners.spark import jvm_archive, logs
    monkeypatch.setenv("HEADRACE_CACHE", str(tmp_path))
    monkeypatch.delenv(jvm_archive.ENV, raising=False)
    path = jvm_archive.archive_path()
    assert path is not None and path.startswith(str(tmp_path))
    jit = f"{logs.JIT_OPTION} {logs.THRESHOLD_OPTION}"
    assert logs.java_options([]) == f"{logs.LOG4J_OPTION} {jit}"   # not built
    with open(path, "wb") as f:                                  # never mapped: no JVM starts
        f.write(b"built")
    assert logs.java_options([]) == (f"{logs.LOG4J_OPTION} -XX:SharedArchiveFile={path} "
                                     f"-Xlog:cds*=off {jit}")
    own = "-XX:SharedArchiveFile=/elsewhere.jsa"
    assert logs.java_options([("spark.driver.extraJavaOptions", own)]) == f"{logs.LOG4J_OPTION} {jit} {own}"
    monkeypatch.setenv(jvm_archive.ENV, "off")
    assert logs.java_options([]) == f"{logs.LOG4J_OPTION} {jit}"
    # another Java (JAVA_HOME elsewhere) has another archive
    monkeypatch.delenv(jvm_archive.ENV)
    fake = tmp_path / "jdk" / "bin"
    fake.mkdir(parents=True)
    (fake / "java").write_text("")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    assert jvm_archive.archive_path() not in (None, path)
    assert logs.java_options([]) == f"{logs.LOG4J_OPTION} {jit}"


def test_a_failed_archive_build_leaves_no_archive(monkeypatch, tmp_path):
    """The archive is renamed into place only after its JVM exited normally: a build whose
    child fails leaves nothing a JVM could map (a partial archive crashes the JVM)."""
    import subprocess

    from headrace.runners.spark import jvm_archive
    monkeypatch.setenv("HEADRACE_CACHE", str(tmp_path))

    def failing(argv, **kwargs):
        with open(argv[-1], "wb") as f:      # a partial archive
            f.write(b"half")
        return subprocess.CompletedProcess(argv, 1, stdout="the JVM died")
    monkeypatch.setattr(jvm_archive.subprocess, "run", failing)
    with pytest.raises(RuntimeError, match="(?s)failed.*exit 1.*the JVM died"):
        jvm_archive.build()
    assert [n for n in os.listdir(tmp_path) if n.endswith(".jsa") or ".building" in n] == []


def test_pysparks_sql_modules_are_imported_while_the_jvm_starts_in_a_thread_started_after_its_spawn(
        monkeypatch):
    """A Spark start imports PySpark's SQL modules (and pandas, pyarrow; Spark Connect's client
    for a local server) in a thread while the launcher waits for the JVM; the thread starts
    after the JVM's process is spawned, and the block waits for it."""
    import threading

    from pyspark import java_gateway

    from headrace.runners.spark import logs

    at_spawn = []

    def spawned(*args, **kwargs):
        at_spawn.append([t.name for t in threading.enumerate()])
        return "process"

    imported = []

    def import_module(name):
        imported.append((name, threading.current_thread().name))
        if name == "pandas":
            raise ImportError("a module that fails is left for its user to report")

    monkeypatch.setattr(java_gateway, "Popen", spawned)
    monkeypatch.setattr(logs.importlib, "import_module", import_module)
    with logs._imports_while_starting(connect=True):
        assert java_gateway.Popen(["java"]) == "process"
    assert at_spawn and "headrace-early-imports" not in at_spawn[0]
    assert [name for name, _ in imported] == list(logs.EARLY_IMPORTS + logs.EARLY_CONNECT_IMPORTS)
    assert {thread for _, thread in imported} == {"headrace-early-imports"}
    assert java_gateway.Popen is spawned   # the launcher's own again
    imported.clear()
    with logs._imports_while_starting(connect=False):
        java_gateway.Popen(["java"])
    assert [name for name, _ in imported] == list(logs.EARLY_IMPORTS)
