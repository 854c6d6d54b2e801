"""A private rabbitmq-server for the RabbitMQ connector's tests: a node of its own (its own
name, AMQP and distribution ports, database, logs, config and Erlang cookie in a temporary
directory, no plugins), started once per test session (it takes seconds) and killed at the end.

Its one user, `headrace`, has a password the tests plant (`PASSWORD`) to check that no error,
log or checkpoint shows it. Debian's /usr/sbin/rabbitmq-server switches to the `rabbitmq` user
when run as root and logs to /var/log; the node is started with the script it wraps
(/usr/lib/rabbitmq/bin/rabbitmq-server) as the user running the tests instead.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import uuid

import pytest

from tests._redis import free_ports

BINARY = "/usr/sbin/rabbitmq-server"
SCRIPT = "/usr/lib/rabbitmq/bin/rabbitmq-server"
USER = "headrace"
PASSWORD = "Rabbit-Planted-5e1d"


class _PortTaken(RuntimeError):
    """The node could not listen on a port chosen for it (eaddrinuse)."""


class RabbitServer:
    """A running private node: `url` (with the password), `connection()`, `queue(name)` (a
    fresh durable queue), `depth(queue)` (messages ready), `publish`."""

    def __init__(self, tmp_dir) -> None:
        self.dir = str(tmp_dir)
        # a port taken between its choice and the node's listen (another test's server, or
        # the node listening on "::" where a port is free on 127.0.0.1 only) ends the node
        # at boot: it is started again on other ports
        for _ in range(2):
            try:
                self._start()
                return
            except _PortTaken:
                pass
        self._start()

    def _start(self) -> None:
        self.port, dist_port = free_ports(2)
        self.url = f"amqp://{USER}:{PASSWORD}@127.0.0.1:{self.port}/%2F"
        with open(os.path.join(self.dir, "rabbitmq.conf"), "w") as fh:
            fh.write(f"default_user = {USER}\ndefault_pass = {PASSWORD}\n"
                     "loopback_users = none\n")
        with open(os.path.join(self.dir, "enabled_plugins"), "w") as fh:
            fh.write("[].\n")
        self.env = env = dict(os.environ, HOME=self.dir,
                   RABBITMQ_NODENAME=f"headrace-{uuid.uuid4().hex[:8]}@localhost",
                   RABBITMQ_NODE_PORT=str(self.port), RABBITMQ_DIST_PORT=str(dist_port),
                   RABBITMQ_MNESIA_BASE=os.path.join(self.dir, "mnesia"),
                   RABBITMQ_LOG_BASE=os.path.join(self.dir, "log"),
                   RABBITMQ_CONFIG_FILE=os.path.join(self.dir, "rabbitmq"),
                   RABBITMQ_ENABLED_PLUGINS_FILE=os.path.join(self.dir, "enabled_plugins"))
        self.log = open(os.path.join(self.dir, "server.out"), "wb")
        self.proc = subprocess.Popen([SCRIPT if os.path.exists(SCRIPT) else BINARY], env=env,
                                     stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + 90
        while True:
            try:
                self.connection().close()
                return
            except Exception:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    with open(os.path.join(self.dir, "server.out"), errors="replace") as fh:
                        tail = fh.read()[-2000:]
                    error = _PortTaken if "eaddrinuse" in tail else RuntimeError
                    raise error(f"rabbitmq-server on port {self.port} did not start:\n{tail}")
                time.sleep(0.25)

    def connection(self):
        import pika
        params = pika.URLParameters(self.url)
        params.socket_timeout = 2
        params.blocked_connection_timeout = 10
        return pika.BlockingConnection(params)

    def queue(self, name: str) -> str:
        """A new durable queue (a unique name starting with `name`)."""
        q = f"{name}-{uuid.uuid4().hex[:8]}"
        conn = self.connection()
        try:
            conn.channel().queue_declare(q, durable=True)
        finally:
            conn.close()
        return q

    def publish(self, queue: str, messages) -> None:
        """Publishes each (body, properties dict) of `messages` to `queue`."""
        import pika
        conn = self.connection()
        try:
            ch = conn.channel()
            ch.confirm_delivery()
            for body, props in messages:
                ch.basic_publish("", queue, body, pika.BasicProperties(**props))
        finally:
            conn.close()

    def depth(self, queue: str) -> int:
        """Messages ready in `queue` (once the readers' connections are closed, those they
        were delivered and did not acknowledge are back among them)."""
        conn = self.connection()
        try:
            return int(conn.channel().queue_declare(queue, passive=True).method.message_count)
        finally:
            conn.close()

    def ctl(self, *args: str) -> str:
        """The output of `rabbitmqctl ARGS` run against this node (e.g. close_all_connections);
        raises with its output if it fails."""
        ctl = os.path.join(os.path.dirname(SCRIPT), "rabbitmqctl")
        proc = subprocess.run([ctl if os.path.exists(ctl) else "rabbitmqctl", *args],
                              env=self.env, capture_output=True, text=True, timeout=120)
        if proc.returncode:
            raise RuntimeError(f"rabbitmqctl {' '.join(args)} failed ({proc.returncode}) on the "
                               f"node of port {self.port}: {proc.stdout}{proc.stderr}")
        return proc.stdout

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.log.close()


def start_server(tmp_path_factory) -> RabbitServer:
    """A new private server, or a skip saying what to install."""
    pytest.importorskip("pika", reason="the RabbitMQ connector's tests need pika: "
                        "pip install 'headrace[rabbitmq]' (or pika>=1.3)")
    if not os.path.exists(BINARY) or not shutil.which("erl"):
        pytest.skip("rabbitmq-server is not installed: install Debian's `rabbitmq-server` "
                    "package (apt-get install rabbitmq-server) to run the RabbitMQ connector's "
                    "tests")
    return RabbitServer(tmp_path_factory.mktemp("rabbitmq"))


def dedup_input(*items):
    """The dedup step's input elements (bucket 0, (digest, arrival us, value)) at event time
    1 s, of (record id, arrival seconds, value) items."""
    import headrace as beam
    from headrace.io.rabbitmqio import record_digest
    return [beam.window.TimestampedValue((0, (record_digest(i), int(at * 1e6), v)), 1)
            for i, at, v in items]
