"""A real PostgreSQL 15 (Debian's postgresql-15) started by the test, for the multi-server tests.

    db = PostgresServer(tmp_path)   # data, socket folder and log under tmp_path
    db.start()                      # initdb on the first start; a free port, kept across restarts
    db.create_database("face")
    dsn = db.dsn("face", "face-a")  # what a server gets in FACE_GALLERY_DSN
    db.sql("SELECT count(*) FROM triton_face.enrollments", "face")  # -> [("3",)]
    db.terminate("face-a")          # kill that client's sessions; how many
    db.stop()                       # fast shutdown: sessions end, committed data stays

PostgreSQL refuses to run as root, so the cluster belongs to the `postgres` user (runuser); the
test itself must run as root. Missing binaries or another user FAIL with how to get them.
"""

from __future__ import annotations

import atexit
import os
import pwd
import shutil
import signal
import stat
import subprocess
from pathlib import Path

import pytest

from triton_server import free_ports

PG_BIN = Path("/usr/lib/postgresql/15/bin")
PG_USER = "postgres"
SETUP_HINT = "`bash scripts/setup.sh` installs it (Debian package postgresql-15)"
TIMEOUT_S = 60
# psql's field and record separators: characters no value of the tests contains.
FIELD, RECORD = "\x1f", "\x1e"

_LIVE: set["PostgresServer"] = set()


def check_prerequisites() -> None:
    """FAIL (never skip) when the cluster cannot be run here, saying how to fix it."""
    missing = [name for name in ("initdb", "pg_ctl", "postgres", "psql")
               if not os.access(PG_BIN / name, os.X_OK)]
    if missing:
        pytest.fail(f"PostgreSQL 15 not found ({', '.join(missing)} missing in {PG_BIN}): "
                    f"{SETUP_HINT}", pytrace=False)
    if shutil.which("runuser") is None:
        pytest.fail("runuser not found (Debian package util-linux)", pytrace=False)
    try:
        pwd.getpwnam(PG_USER)
    except KeyError:
        pytest.fail(f"no user {PG_USER!r}: {SETUP_HINT}", pytrace=False)
    if os.geteuid() != 0:
        pytest.fail("the PostgreSQL tests run the cluster as the postgres user (runuser): "
                    "run them as root (as in the project's containers)", pytrace=False)


def _let_others_traverse(folder: Path) -> None:
    """o+x on `folder` and its parents: pytest makes its temporary folders 0700 (root only),
    and the postgres user must reach its data folder inside one."""
    for path in (folder, *folder.parents):
        mode = path.stat().st_mode
        if not mode & stat.S_IXOTH:
            path.chmod(stat.S_IMODE(mode) | stat.S_IXOTH)


# The database the suite's galleries live in (the `postgres` fixture creates it).
SUITE_DB = "face"


class PostgresServer:
    """One PostgreSQL cluster in `root` (data/, sock/, postgres.log), owned by postgres."""

    def __init__(self, root: Path):
        check_prerequisites()
        self.root = Path(root)
        self.data = self.root / "data"
        self.sockets = self.root / "sock"
        self.log_path = self.root / "postgres.log"
        self.port = 0

    def _as_postgres(self, *command: str, timeout: float = TIMEOUT_S + 10) -> str:
        done = subprocess.run(
            ["runuser", "-u", PG_USER, "--", *command], capture_output=True, text=True,
            timeout=timeout, cwd=self.root,
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout}{done.stderr}\n"
                f"---- {self.log_path} ----\n{self.log_tail()}"
            )
        return done.stdout

    def _init(self) -> None:
        _let_others_traverse(self.root)
        self.sockets.mkdir(parents=True)
        user = pwd.getpwnam(PG_USER)
        for path in (self.root, self.sockets):
            os.chown(path, user.pw_uid, user.pw_gid)
        # --no-sync: a throw-away cluster; the server itself keeps fsync on.
        self._as_postgres(str(PG_BIN / "initdb"), "-D", str(self.data), "-A", "trust",
                          "-U", PG_USER, "--no-sync", "-E", "UTF8")
        self.port = free_ports(1)[0]

    def start(self) -> "PostgresServer":
        """Start (initdb first if needed) and wait until it accepts connections. A restart keeps
        the port: the servers' DSNs name it."""
        if not self.data.exists():
            self._init()
        options = f"-p {self.port} -k {self.sockets} -c listen_addresses=127.0.0.1"
        _LIVE.add(self)
        self._as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-o", options,
                          "-l", str(self.log_path), "-w", "-t", str(TIMEOUT_S), "start")
        return self

    def stop(self, mode: str = "fast") -> None:
        """pg_ctl stop: `fast` ends the sessions and shuts down cleanly; `immediate` is a crash."""
        _LIVE.discard(self)
        if self.running:
            self._as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w",
                              "-t", str(TIMEOUT_S), "stop")

    @property
    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def _kill(self) -> None:
        """Last resort: SIGQUIT the postmaster (immediate shutdown) without waiting."""
        try:
            pid = int((self.data / "postmaster.pid").read_text().split()[0])
            os.kill(pid, signal.SIGQUIT)
        except (OSError, ValueError, IndexError):
            pass

    # ---- clients --------------------------------------------------------------------------

    def dsn(self, db: str, application_name: str, form: str = "url") -> str:
        """A DSN over TCP as the servers use it: `url` (postgresql://...) or `keyword`."""
        if form == "url":
            return (f"postgresql://{PG_USER}@127.0.0.1:{self.port}/{db}"
                    f"?application_name={application_name}")
        return (f"host=127.0.0.1 port={self.port} user={PG_USER} dbname={db} "
                f"application_name={application_name}")

    def sql(self, query: str, db: str = "postgres") -> list[tuple[str, ...]]:
        """Run `query` with psql (as the superuser, over the socket folder); the rows of its last
        statement as tuples of text (NULL is "")."""
        done = subprocess.run(
            [str(PG_BIN / "psql"), "-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1",
             "-h", str(self.sockets), "-p", str(self.port), "-U", PG_USER, "-d", db,
             "-F", FIELD, "-R", RECORD, "-c", query],
            capture_output=True, text=True, timeout=TIMEOUT_S,
        )
        if done.returncode != 0:
            raise RuntimeError(f"psql -d {db} -c {query!r}: {done.stderr.strip()}")
        out = done.stdout.rstrip("\n")
        return [tuple(row.split(FIELD)) for row in out.split(RECORD) if row] if out else []

    def copy_in(self, table: str, columns: str, lines, db: str = "postgres") -> None:
        """COPY `lines` (text format: tab-separated fields, bytea as \\x hex, one row each)
        into `table (columns)`, streamed through psql's standard input."""
        psql = subprocess.Popen(
            [str(PG_BIN / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", str(self.sockets),
             "-p", str(self.port), "-U", PG_USER, "-d", db,
             "-c", f"COPY {table} ({columns}) FROM STDIN"],
            stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        try:
            for line in lines:
                psql.stdin.write(line + "\n")
            psql.stdin.close()
        except BrokenPipeError:
            pass
        if psql.wait(timeout=TIMEOUT_S * 10) != 0:
            raise RuntimeError(f"COPY {table}: {psql.stderr.read().strip()}")

    def terminate(self, application_name: str) -> int:
        """pg_terminate_backend on every session of that application_name; how many."""
        name = application_name.replace("'", "''")
        [(count,)] = self.sql(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
            f"WHERE application_name = '{name}'"
        )
        return int(count)

    def sessions(self, application_name: str) -> int:
        name = application_name.replace("'", "''")
        [(count,)] = self.sql(
            f"SELECT count(*) FROM pg_stat_activity WHERE application_name = '{name}'")
        return int(count)

    def create_database(self, name: str) -> None:
        self.sql(f'CREATE DATABASE "{name}"')

    def log_tail(self, lines: int = 40) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


@atexit.register
def _stop_leftovers() -> None:
    """Last resort (e.g. pytest interrupted before fixture teardown): never leak a cluster."""
    for server in list(_LIVE):
        server._kill()
