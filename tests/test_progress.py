"""Progress while a Spark run runs: shown on a terminal (a pseudo-terminal here), and nothing
extra when standard error is not one."""

import os
import pty
import re
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent('''
    import sys
    import headrace as beam
    from headrace.options.pipeline_options import PipelineOptions
    from headrace.testing.test_stream import TestStream
    from headrace.transforms import window

    flags = ["--runner=SparkRunner", "--spark_master=local[2]", "--spark_conf=spark.ui.enabled=false",
             "--spark_conf=spark.sql.shuffle.partitions=2"]
    data = sys.argv[0] + ".txt"
    with open(data, "w") as fh:
        fh.writelines(f"{i}\\n" for i in range(2000))
    flags += sys.argv[1:]
    with beam.Pipeline(options=PipelineOptions(flags)) as p:
        _ = (p | beam.io.ReadFromText(data) | beam.Map(lambda x: (int(x) % 7, int(x)))
             | "Total" >> beam.CombinePerKey(sum) | beam.Map(print))
    stream = (TestStream().advance_watermark_to(0)
              .add_elements([window.TimestampedValue(("a", 1), 1)]).advance_watermark_to(100)
              .add_elements([window.TimestampedValue(("a", 2), 2)]).advance_watermark_to_infinity())
    streaming = flags + ["--streaming", "--test_stream_events_per_batch=1"]   # a batch per step
    with beam.Pipeline(options=PipelineOptions(streaming)) as p:
        _ = (p | "Events" >> stream | beam.WindowInto(window.FixedWindows(10))
             | "Sums" >> beam.CombinePerKey(sum))
    print("script done", file=sys.stderr)
''')
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _env():
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, COLUMNS="120")
    env["PYTHONPATH"] = os.pathsep.join([os.getcwd()] + [p for p in [env.get("PYTHONPATH")] if p])
    return env


def _under_a_terminal(script, args):
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, str(script), *args], stdin=subprocess.DEVNULL,
                            stdout=slave, stderr=slave, env=_env())
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:   # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.wait(timeout=300) == 0, b"".join(chunks).decode(errors="replace")[-3000:]
    return ANSI.sub("", b"".join(chunks).decode(errors="replace")).replace("\r", "\n")


@pytest.mark.slow
def test_progress_is_shown_on_a_terminal_and_not_elsewhere(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    shown = _under_a_terminal(script, [])
    running = [(int(d), int(t)) for d, t in re.findall(r"headrace: running, (\d+)/(\d+) tasks", shown)]
    assert running and all(d <= t for d, t in running), shown[-3000:]
    # the records the run's read produced, counted as its tasks end
    assert re.search(r"headrace: done, [1-9]\d* tasks, 2,000 records read \([\d,]+/s\), \d+:\d\d",
                     shown), shown[-3000:]
    batches = re.findall(r"headrace: batch (\d+), [\d,]+ input rows, [\d,]+ rows/s, .* late dropped, "
                         r"[\d,]+ state rows", shown)
    assert batches and batches == sorted(batches, key=int) and len(set(batches)) == len(batches)
    # the source's watermark, as its script moves it
    assert "watermark Events 1970-01-01T00:01:40Z" in shown and "script done" in shown
    # not a terminal: nothing but what the run prints anyway
    piped = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=_env(),
                           timeout=300)
    assert piped.returncode == 0, piped.stderr[-3000:]
    out = piped.stderr + piped.stdout
    assert "script done" in out
    assert "tasks" not in out and "headrace: batch" not in out, out[-3000:]


class _Stream:
    def __init__(self, tty):
        self.tty = tty

    def isatty(self):
        return self.tty


def test_progress_is_wanted_on_a_terminal_unless_no_progress_is_given():
    from headrace.options.pipeline_options import PipelineOptions
    from headrace.runners.spark import progress
    assert progress.wanted(PipelineOptions([]), _Stream(True))
    assert not progress.wanted(PipelineOptions([]), _Stream(False))
    assert not progress.wanted(PipelineOptions(["--no_progress"]), _Stream(True))
    assert not progress.wanted(PipelineOptions([]), object())   # no isatty at all


def test_a_spark_connect_batch_run_shows_its_stages_from_the_sessions_progress_handler(capsys):
    """Spark Connect has no status tracker: the display registers a progress handler with the
    session for the run, shows its operations' stages and bytes read, and removes it after."""
    import io

    from pyspark.sql.connect.shell.progress import StageInfo
    from rich.console import Console

    from headrace.runners.spark import progress

    class Session:
        def __init__(self):
            self.handlers = []

        def registerProgressHandler(self, handler):
            self.handlers.append(handler)

        def removeProgressHandler(self, handler):
            self.handlers.remove(handler)

    class Frames:   # as the batch runner's FrameContext: a session, no status tracker
        spark = Session()

    frames = Frames()
    with progress.BatchProgress(frames, "group", "headrace", True) as shown:
        [handler] = frames.spark.handlers
        handler(stages=[StageInfo(0, 4, 4, 3 * 2**20, True), StageInfo(1, 2, 1, 0, False)],
                inflight_tasks=1, operation_id="op", done=False)
        # a second operation whose stage 3 runs after stage 2, skipped (never started)
        handler(stages=[StageInfo(2, 5, 0, 0, False), StageInfo(3, 2, 1, 0, False)],
                inflight_tasks=1, operation_id="op2", done=False)
        handler(stages="not stages", inflight_tasks=0, operation_id="op", done=False)  # ignored
        out = io.StringIO()
        Console(file=out, width=120).print(shown._render(shown._stages()))
    text = out.getvalue()
    assert "headrace: running, 6/8 tasks, 3.0 MiB read" in text and "stage 1: 1/2 tasks" in text
    assert "stage 3: 1/2 tasks" in text
    assert "stage 0" not in text and "stage 2" not in text   # (done; skipped)
    assert frames.spark.handlers == []
    assert "headrace: done, 6 tasks, 3.0 MiB read" in capsys.readouterr().err
