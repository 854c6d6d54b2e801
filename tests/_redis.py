"""A private redis-server for the Redis connector's tests: started from the installed binary
on a free port, nothing on disk, killed when the tests that use it are done."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import uuid

import pytest

BINARY = shutil.which("redis-server") or "/usr/bin/redis-server"


def free_port() -> int:
    """A free port on 127.0.0.1."""
    return free_ports(1)[0]


def free_ports(n: int) -> list:
    """`n` distinct free ports (the sockets are held open together, so no two are the same)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class RedisServer:
    """A running redis-server process: `url`, `client()`, `stream(name)` (a fresh key)."""

    def __init__(self, tmp_dir, password=None) -> None:
        self.port = free_port()
        self.password = password
        auth = f":{password}@" if password else ""
        self.url = f"redis://{auth}127.0.0.1:{self.port}/0"
        self.proc = subprocess.Popen(
            [BINARY, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--daemonize", "no", "--dir", str(tmp_dir),
             *(["--requirepass", password] if password else [])],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while True:
            try:
                self.client().ping()
                return
            except Exception:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"redis-server on port {self.port} did not start")
                time.sleep(0.05)

    def client(self):
        import redis
        return redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=2,
                           password=self.password)

    def stream(self, name: str) -> str:
        return f"{name}-{uuid.uuid4().hex[:8]}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def start_server(tmp_path_factory, password=None) -> RedisServer:
    """A new private server, or a skip saying what to install."""
    pytest.importorskip("redis", reason="the Redis connector's tests need redis-py: "
                        "pip install 'headrace[redis]' (or redis>=5)")
    if not shutil.which(BINARY):
        pytest.skip("redis-server is not installed: install Debian's `redis-server` package "
                    "(apt-get install redis-server) to run the Redis connector's tests")
    return RedisServer(tmp_path_factory.mktemp("redis"), password)
