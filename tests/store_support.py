"""Helpers for the store tests: a real PostgreSQL server, and worker processes.

``PostgresServer`` runs the machine's own server binaries: ``initdb`` in a fresh temp dir,
``pg_ctl start`` listening only on a Unix socket in that dir (no TCP port, no network), one
database created, everything stopped and removed afterwards. As root (a CI container),
the server runs as the ``postgres`` user, since PostgreSQL refuses to run as root.

Run as a script, this module is the worker the multi-process tests start::

    python tests/store_support.py log URL SESSION          # append forever, print each seq
    python tests/store_support.py race URL SESSION NAME N START_AT
    python tests/store_support.py summary URL NAME START_AT

Every line is printed and flushed only after the store acknowledged the write, so a line
the parent read is a promise the store must keep.
"""

from __future__ import annotations

import asyncio
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PG_ENABLE_HINT = (
    "PostgreSQL server binaries (initdb, pg_ctl) not found: apt-get install postgresql "
    "to run the PostgreSQL store tests"
)


def pg_binary(name: str) -> str | None:
    """A PostgreSQL server binary from PATH, else from Debian's versioned directory."""
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return candidates[-1] if candidates else None


def postgres_unavailable() -> str | None:
    """Why a server cannot be started here, or None when it can."""
    if pg_binary("initdb") is None or pg_binary("pg_ctl") is None:
        return PG_ENABLE_HINT
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "running as root without runuser: PostgreSQL refuses to run as root"
    return None


REQUIRE_ENV = "CONTEXTFOLD_REQUIRE_POSTGRES"


def start_or_skip() -> PostgresServer:
    """A started server for a test fixture; without binaries, skip (or fail, in CI).

    CI sets ``CONTEXTFOLD_REQUIRE_POSTGRES=1`` so a missing server is a failure there, never
    a silent skip.
    """
    import pytest

    reason = postgres_unavailable()
    if reason and os.environ.get(REQUIRE_ENV):
        pytest.fail(f"{REQUIRE_ENV} is set but {reason}")
    if reason:
        pytest.skip(reason)
    return PostgresServer().start()


# What users made in a database: schemas beyond the built-in ones, and relations, functions
# and types in `public`. A database given back is reused only when this counts nothing.
_MADE_BY_USERS = """
SELECT (SELECT count(*) FROM pg_namespace
        WHERE nspname NOT IN ('pg_catalog', 'information_schema', 'public', 'pg_toast')
          AND nspname NOT LIKE 'pg_temp_%' AND nspname NOT LIKE 'pg_toast_temp_%')
     + (SELECT count(*) FROM pg_class WHERE relnamespace = 'public'::regnamespace)
     + (SELECT count(*) FROM pg_proc WHERE pronamespace = 'public'::regnamespace)
     + (SELECT count(*) FROM pg_type WHERE typnamespace = 'public'::regnamespace)
"""


class PostgresServer:
    """A throwaway PostgreSQL server on a Unix socket in a temp dir."""

    def __init__(self, database: str = "contextfold_test") -> None:
        self.database = database
        self.root = Path(tempfile.mkdtemp(prefix="cf-pg-"))
        self.data = self.root / "data"
        self._as_user: list[str] = []
        self._made = 0
        self._given_back: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
            self._as_user = ["runuser", "-u", "postgres", "--"]

    @property
    def url(self) -> str:
        return f"postgresql:///{self.database}?host={self.root}&user=postgres"

    def _run(self, *command: str) -> None:
        result = subprocess.run(
            [*self._as_user, *command], capture_output=True, text=True, timeout=60
        )
        if result.returncode != 0:
            raise RuntimeError(f"{command[0]} failed: {result.stdout}{result.stderr}")

    def start(self) -> PostgresServer:
        initdb, pg_ctl = pg_binary("initdb"), pg_binary("pg_ctl")
        assert initdb and pg_ctl, PG_ENABLE_HINT
        self._run(initdb, "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync")
        # fsync=off: the data directory is thrown away with the server, and these tests kill
        # clients, never the machine, so a crash of the server process still loses nothing
        # (what it wrote is in the OS cache); syncing each commit only made every test wait.
        # One server serves the whole run (tests/conftest.py), hence room for many clients.
        self._run(
            pg_ctl,
            "-D",
            str(self.data),
            "-l",
            str(self.root / "server.log"),
            "-w",
            "-o",
            f"-k {self.root} -h '' -c max_connections=200 -c fsync=off",
            "start",
        )
        import psycopg

        with psycopg.connect(
            f"dbname=postgres host={self.root} user=postgres", autocommit=True
        ) as connection:
            connection.execute(f'CREATE DATABASE "{self.database}"')
        return self

    def fresh_database(self, name: str) -> str:
        """A new empty database on this server; its URL."""
        import psycopg

        with psycopg.connect(
            f"dbname=postgres host={self.root} user=postgres", autocommit=True
        ) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql:///{name}?host={self.root}&user=postgres"

    def empty_database(self) -> str:
        """The URL of a database with nothing in it but PostgreSQL's own catalogs: one a test
        gave back (`give_back`), else a new one. A new database copies its template (about
        7 MB written, then deleted with the server); emptying a used one costs a statement."""
        if self._given_back:
            name = self._given_back.pop()
        else:
            self._made += 1
            name = f"empty_{self._made}"
            self.fresh_database(name)
        return f"postgresql:///{name}?host={self.root}&user=postgres"

    def give_back(self, url: str) -> None:
        """Empty a database from `empty_database` once its test is done, for the next test.
        Only contextfold's schema is dropped: a database where a client is still connected or
        anything else was made is left alone, never reused."""
        import psycopg

        name = url.removeprefix("postgresql:///").partition("?")[0]
        with psycopg.connect(
            f"dbname={name} host={self.root} user=postgres", autocommit=True
        ) as connection:
            others = connection.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchone()
            if others is None or others[0] != 0:
                return
            connection.execute("DROP SCHEMA IF EXISTS contextfold CASCADE")
            left = connection.execute(_MADE_BY_USERS).fetchone()
        if left is not None and left[0] == 0:
            self._given_back.append(name)

    def stop(self) -> None:
        pg_ctl = pg_binary("pg_ctl")
        if pg_ctl and (self.data / "postmaster.pid").exists():
            self._run(pg_ctl, "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)


# -- the worker processes -----------------------------------------------------------------


def _say(*parts: object) -> None:
    print(*parts, flush=True)


def _wait_until(start_at: float) -> None:
    delay = start_at - time.time()
    if delay > 0:
        time.sleep(delay)


async def _log(url: str, session_id: str) -> None:
    """Append m<seq> after whatever is stored, forever; print each acknowledged seq."""
    from contextfold.store import open_store

    store = await open_store(url)
    seq = (await store.open_session(session_id)).last_seq
    while True:
        message = json.dumps({"role": "user", "content": f"m{seq + 1}"})
        seq = await store.append(session_id, seq, message, seq + 1)
        _say(seq)


async def _race(url: str, session_id: str, name: str, count: int, start_at: float) -> None:
    """Append ``count`` messages from a local view of the seq; on a conflict, reload, retry."""
    from contextfold.store import ConcurrentUpdateError, open_store

    store = await open_store(url)
    _wait_until(start_at)
    seq = 0  # both workers believe the session is new: the first write races too
    conflicts = 0
    for index in range(count):
        message = json.dumps({"role": "assistant", "content": f"{name}-{index}"})
        while True:
            try:
                seq = await store.append(session_id, seq, message, 1)
                break
            except ConcurrentUpdateError as conflict:
                conflicts += 1
                assert conflict.expected_seq == seq
                seq = (await store.open_session(session_id)).last_seq
        _say("ack", seq, f"{name}-{index}")
    _say("conflicts", conflicts)
    await store.close()


async def _summary(url: str, name: str, start_at: float) -> None:
    from contextfold.store import open_store
    from contextfold.summaries import SummaryRecord, covered_hash

    store = await open_store(url)
    _wait_until(start_at)
    record = SummaryRecord(
        text=f"summary written by {name}",
        history_ids=(0, 1),
        covered_hash=covered_hash([{"role": "user", "content": "the same span"}]),
        summarizer=name,
        prompt_id="p",
        prompt_version=1,
        tokens=5,
        session_id="shared",
    )
    held = await store.put_if_absent(record)
    _say("held", held.text)
    await store.close()


def main(argv: list[str]) -> None:
    mode, url = argv[0], argv[1]
    if mode == "log":
        asyncio.run(_log(url, argv[2]))
    elif mode == "race":
        asyncio.run(_race(url, argv[2], argv[3], int(argv[4]), float(argv[5])))
    elif mode == "summary":
        asyncio.run(_summary(url, argv[2], float(argv[3])))
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
