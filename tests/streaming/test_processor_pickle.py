"""The stateful operator's processor as Spark pickles it (`streaming.processor.processor`): light
enough that Spark's pre-init on the driver (a fresh Python process that runs only `init` and
`close`, at a query's first micro-batch) imports no headrace module, and the steps it carries
come back whole when a key arrives."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from pyspark import cloudpickle

from headrace.runners.spark.streaming.processor import processor
from headrace.runners.spark.worker.env import WorkerEnv


class _Handle:
    """A stand-in for Spark's processor handle: records the state variables declared."""

    def __init__(self) -> None:
        self.declared = []

    def getValueState(self, name, schema):
        self.declared.append((name, schema.simpleString()))
        return ("cell", name)


def test_a_pre_init_imports_no_headrace_module(tmp_path):
    proc = processor({}, b"\0\0\0\0", WorkerEnv(100, 3, str(tmp_path / "failures")),
                     str(tmp_path / "reads"))
    data = tmp_path / "processor.pickle"
    data.write_bytes(cloudpickle.dumps(proc))
    script = textwrap.dedent(f"""
        import pickle, sys
        class Handle:
            def getValueState(self, name, schema):
                print("declared", name, schema.simpleString())
        proc = pickle.loads(open({str(data)!r}, "rb").read())
        proc.init(Handle())
        proc.close()
        print("headrace modules", sorted(m for m in sys.modules if m.split(".")[0] == "headrace"))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         cwd=str(tmp_path), timeout=120)
    assert out.returncode == 0, out.stderr
    assert "declared key_state struct<b:binary>" in out.stdout
    assert "headrace modules []" in out.stdout, out.stdout


def test_the_steps_come_back_at_the_first_key(tmp_path):
    proc = processor({}, b"\0\0\0\1", WorkerEnv(100, 3, str(tmp_path / "failures")),
                     str(tmp_path / "reads"))
    back = cloudpickle.loads(cloudpickle.dumps(proc))
    handle = _Handle()
    back.init(handle)
    assert handle.declared == [("key_state", "struct<b:binary>")]
    steps = back._steps()
    assert steps.forward_key == b"\0\0\0\1" and steps.env.bundle_size == 100
    assert steps.cell.cell == ("cell", "key_state") and steps.cell.handle is handle
    assert back._steps() is steps
    back.close()
