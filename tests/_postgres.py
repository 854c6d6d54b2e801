"""A private PostgreSQL cluster for the tests: `initdb` and `pg_ctl` of the installed server
(Debian's `postgresql` package) into a temporary directory, on a free loopback port, with trust
authentication; started once per test session and stopped at its end. Under root (initdb
refuses it) the cluster belongs to the `postgres` user."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from typing import List, Optional

from tests._redis import free_port


def server_bin() -> Optional[str]:
    """The newest installed server's bin directory, or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(p.split("/")[4]) if p.split("/")[4].isdigit() else 0)
    return os.path.dirname(found[-1]) if found else None


class PrivateCluster:
    """A started cluster: `dsn` (database `postgres`), `stop()`; `stop_server()` and
    `start_server()` stop and start its server (the chaos benchmark's faults: make it `durable`)."""

    def __init__(self, bindir: str, durable: bool = False) -> None:
        self.bindir = bindir
        # synchronous_commit=off (fast) loses the last ~200 ms of acknowledged commits when the
        # server crashes (stop -m immediate); a durable cluster keeps every commit it acknowledged
        self.commit = "on" if durable else "off"
        self.root = tempfile.mkdtemp(prefix="headrace-pg-", dir="/tmp")
        self.data = os.path.join(self.root, "data")
        self.port = free_port()
        self._as: List[str] = []
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(self.root, user.pw_uid, user.pw_gid)
            self._as = ["runuser", "-u", "postgres", "--"]
        self._run("initdb", "-D", self.data, "-A", "trust", "-U", "postgres", "-E", "UTF8",
                  "--no-sync")
        self.start_server()
        self.dsn = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def start_server(self) -> None:
        """Starts the server (on the cluster's port), waiting until it accepts connections."""
        self._run("pg_ctl", "-D", self.data, "-l", os.path.join(self.root, "log"), "-w", "start",
                  "-o", f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 "
                        f"-c fsync=off -c synchronous_commit={self.commit} -c full_page_writes=off")

    def stop_server(self) -> None:
        """Stops the server at once (`pg_ctl stop -m immediate`: a crash), keeping its data."""
        self._run("pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop")

    def _run(self, tool: str, *args: str) -> None:
        proc = subprocess.run([*self._as, os.path.join(self.bindir, tool), *args],
                              capture_output=True, text=True, cwd=self.root)
        if proc.returncode:
            raise RuntimeError(f"{tool} failed ({proc.returncode}): {proc.stdout}{proc.stderr}")

    def stop(self) -> None:
        """Stops the server and removes its directory."""
        try:
            self._run("pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def table_name(prefix: str) -> str:
    """A table name of its own for one test."""
    return f"{prefix}_{uuid.uuid4().hex[:10]}"
