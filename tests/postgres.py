"""A throwaway PostgreSQL cluster for the tests: Debian's server binaries, a temporary data directory,
loopback TCP on a free port, trust authentication. Run as the ``postgres`` user when the tests run as
root (the server refuses root). Never a mock: the state's tests and the fleet's run against it."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

from tests import processes


def bindir() -> Path | None:
    """Where ``initdb`` and ``pg_ctl`` are (Debian keeps them out of PATH); ``None`` when not installed."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return None if initdb is None else Path(initdb).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """``start()``, ``stop()``, ``restart()``, ``url(db)`` and ``create_database()`` on one temporary cluster."""

    def __init__(self, port: int | None = None):
        self.bin = bindir()
        if self.bin is None:
            raise RuntimeError("PostgreSQL's server is not installed (apt-get install postgresql)")
        self.port = port or free_port()
        self.root = Path(tempfile.mkdtemp(prefix="lmve-pg-", dir="/tmp"))
        self.data, self.log = self.root / "data", self.root / "server.log"
        self._as = []
        if os.geteuid() == 0:  # initdb and postgres refuse root: the cluster belongs to the postgres user
            self.root.chmod(0o755)
            shutil.chown(self.root, "postgres", "postgres")
            self._as = ["runuser", "-u", "postgres", "--"]
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "lmve", "--no-sync", "-E", "UTF8")
        processes.on_exit(self.destroy)  # the server is a daemon, not a child: destroyed at the run's end at the latest

    def _run(self, tool: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run([*self._as, str(self.bin / tool), *args], capture_output=True, text=True,
                              check=check, timeout=120)

    def start(self) -> "Cluster":
        options = (f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root} -c fsync=off "
                   "-c full_page_writes=off -c max_connections=200")
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "-t", "60", "start")
        processes.record_group(int((self.data / "postmaster.pid").read_text().split()[0]))  # pg_ctl's setsid
        return self

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop", check=False)

    def restart(self) -> None:
        self.stop()
        self.start()

    def url(self, db: str = "postgres") -> str:
        return f"postgresql://lmve@127.0.0.1:{self.port}/{db}"

    def create_database(self) -> str:
        """A fresh empty database; its URL."""
        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def destroy(self) -> None:
        """Stop the server (``immediate``) and delete the cluster; a second call does nothing."""
        if self.root.exists():
            self.stop("immediate")
            shutil.rmtree(self.root, ignore_errors=True)
