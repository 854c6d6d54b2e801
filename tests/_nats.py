"""A private nats-server with JetStream for the JetStream connector's tests: started from the
installed binary on a free port, its store in a temporary directory, killed when the tests that
use it are done. `run` runs a coroutine against a fresh connection (the tests' writers)."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import time
import uuid
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import pytest

BINARY = shutil.which("nats-server") or "/usr/sbin/nats-server"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class NatsServer:
    """A running nats-server -js: `url`, `run(fn)`, `stream(name)` (a fresh stream),
    `publish(subject, payloads)` (the stream sequences they got)."""

    def __init__(self, tmp_dir: Any) -> None:
        self.port = free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [BINARY, "-js", "-a", "127.0.0.1", "-p", str(self.port), "-sd", str(tmp_dir)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while True:
            try:
                self.run(lambda nc: nc.jetstream().account_info())
                return
            except Exception:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"nats-server on port {self.port} did not start")
                time.sleep(0.1)

    def run(self, fn: Callable[[Any], Any]) -> Any:
        """The result of the coroutine `fn(connection)`, on a connection of its own."""
        import nats

        async def main() -> Any:
            nc = await nats.connect(self.url, connect_timeout=2, max_reconnect_attempts=0,
                                    allow_reconnect=False)
            try:
                return await fn(nc)
            finally:
                await nc.close()
        return asyncio.run(main())

    def stream(self, name: str, subjects: Optional[Sequence[str]] = None) -> Tuple[str, str]:
        """A new stream (name, subject prefix): its subjects are `<prefix>.>` unless given."""
        tag = uuid.uuid4().hex[:8]
        stream, prefix = f"{name}_{tag}", f"{name}.{tag}"
        self.run(lambda nc: nc.jetstream().add_stream(
            name=stream, subjects=list(subjects or [f"{prefix}.>"])))
        return stream, prefix

    def publish(self, items: Sequence[Tuple[str, bytes, Optional[Dict[str, str]]]]) -> List[int]:
        """Publishes (subject, data, headers) in order; the stream sequence of each."""
        async def pub(nc: Any) -> List[int]:
            js = nc.jetstream()
            return [(await js.publish(subject, data, headers=headers)).seq
                    for subject, data, headers in items]
        return self.run(pub)

    def stored(self, stream: str, seqs: Sequence[int]) -> List[Any]:
        """The stored messages (RawStreamMsg: subject, seq, data, time) at `seqs`."""
        async def get(nc: Any) -> List[Any]:
            return [await nc.jsm().get_msg(stream, s) for s in seqs]
        return self.run(get)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def start_server(tmp_path_factory: Any) -> NatsServer:
    """A new private server, or a skip saying what to install."""
    pytest.importorskip("nats", reason="the JetStream connector's tests need nats-py: "
                        "pip install 'headrace[nats]' (or nats-py)")
    if not shutil.which(BINARY):
        pytest.skip("nats-server is not installed: install Debian's `nats-server` package "
                    "(apt-get install nats-server) to run the JetStream connector's tests")
    return NatsServer(tmp_path_factory.mktemp("nats"))
