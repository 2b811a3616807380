"""Opening a SQLite store file: recognise it before anything is written to it.

contextfold writes only into a file it created (DESIGN invariant 9). A file is ours when its
header carries our application id (``PRAGMA application_id``, b"cfld"): every contextfold
store has had it since the first version, stamped in the transaction that created its
tables. In this order, before any write:

- a path that is not a regular file (a folder, a device node, a FIFO) is refused;
- a missing or empty file becomes a new store (never when opening to read only: then it is
  an error, and nothing is created);
- a file that is not SQLite, or a truncated one, is refused;
- the application id is read from the header's bytes: another application's id is refused
  without SQLite ever opening the file; an id of 0 may still be ours (a store whose first
  transaction is only in its write-ahead log), so it is read through a read-only connection
  that cannot write, and refused unless it is ours.

A store opened read-only (by request, or because the file or its folder cannot be written:
a mounted backup) is read as it is, never created, migrated or switched to WAL; writes get a
clear error. A read-only store of an older layout is read through a migrated private copy.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar
from urllib.parse import quote

from contextfold.store.base import StoreError, StoreSchemaError
from contextfold.store.schema import (
    LEGACY_VERSION_TABLE,
    META_TABLE,
    META_VERSION_KEY,
    SCHEMA_VERSION,
    SEARCH_INDEX_VERSION,
    SQLITE_MIGRATIONS,
    check_version,
    meta_statements,
    read_meta_version,
)
from contextfold.store.sqlite_search import backfill

__all__ = ["APPLICATION_ID", "Opened", "check_path", "open_file"]

# Written into the file header (PRAGMA application_id) so a contextfold store is recognisable
# and another application's SQLite file is refused instead of written into: b"cfld".
APPLICATION_ID = int.from_bytes(b"cfld", "big")
_SQLITE_HEADER = b"SQLite format 3\x00"
_HEADER_SIZE = 100
_APPLICATION_ID_AT = slice(68, 72)  # big-endian, in the database header
_WAL_FORMAT = 2  # header byte 18 (write format): 1 rollback journal, 2 write-ahead log
_MMAP_BYTES = 256 * 1024 * 1024  # address space, not memory: pages load as they are read
READ_ONLY_REQUESTED = "opened for reading only"

Explain = Callable[[sqlite3.Error], StoreError]
_T = TypeVar("_T")


@dataclass
class Opened:
    """A connection to a store, and how it may be used."""

    connection: sqlite3.Connection
    read_only: str | None = None  # why it cannot be written; None when it can
    copy: Path | None = None  # a private migrated copy's folder, removed at close

    def discard_copy(self) -> None:
        if self.copy is not None:
            shutil.rmtree(self.copy, ignore_errors=True)
            self.copy = None


def check_path(path: object) -> Path:
    """A store path the file system can take, refused at construction otherwise (a NUL
    character, or text no file name can hold)."""
    if not isinstance(path, str | os.PathLike):
        raise StoreError(f"a SQLite store path must be a path, got {type(path).__name__}")
    try:
        encoded = os.fsencode(path)
    except UnicodeEncodeError:
        raise StoreError(
            f"the SQLite store path {os.fspath(path)!r:.120} is not text a file name can hold"
        ) from None
    if b"\x00" in encoded:
        raise StoreError(
            f"the SQLite store path {os.fspath(path)!r:.120} contains a NUL character "
            "(%00 in a URL); no file name can hold one"
        )
    if not encoded:
        raise StoreError("the SQLite store path is empty; name a file")
    return Path(os.fsdecode(encoded))


def open_file(path: Path, busy_timeout: float, *, read_only: bool, explain: Explain) -> Opened:
    """The store at ``path``, opened as described in the module's docstring."""
    header = _examine(path, read_only=read_only)
    if header is None:
        return Opened(_writable(path, busy_timeout, explain))
    if int.from_bytes(header[_APPLICATION_ID_AT], "big") != APPLICATION_ID:
        _probe(path, header, busy_timeout, explain)
    reason = _unwritable(path)
    if reason is None and not read_only:
        return Opened(_writable(path, busy_timeout, explain))
    return _open_readable(path, busy_timeout, reason or READ_ONLY_REQUESTED, explain)


# -- what is at the path ---------------------------------------------------------------------


def _examine(path: Path, *, read_only: bool) -> bytes | None:
    """The file's header, or None when a new store is to be made there."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        if read_only:
            raise StoreError(
                f"there is no SQLite store at {path} (no such file); check the path: "
                "nothing was created"
            ) from None
        parent = path.parent
        if not parent.is_dir():
            raise StoreError(f"the directory of the SQLite store {path} does not exist") from None
        return None
    except OSError as error:
        raise StoreError(f"cannot open the SQLite store {path}: {error.strerror}") from None
    if stat.S_ISDIR(info.st_mode):
        raise StoreError(f"{path} is a directory, not a SQLite store file")
    if not stat.S_ISREG(info.st_mode):
        raise StoreError(
            f"{path} is {_kind(info.st_mode)}, not a SQLite store file; nothing was written"
        )
    if info.st_size == 0:
        if read_only:
            raise StoreError(f"{path} is an empty file: it holds no contextfold store yet")
        return None
    try:
        with path.open("rb") as file:
            header = file.read(_HEADER_SIZE)
    except OSError as error:
        raise StoreError(f"cannot read the SQLite store {path}: {error.strerror}") from None
    if not header.startswith(_SQLITE_HEADER) and not _SQLITE_HEADER.startswith(header):
        raise StoreError(
            f"{path} is not a SQLite database (its first bytes are {header[:8]!r}); "
            "point the store at a new file or an existing contextfold store"
        )
    if len(header) < _HEADER_SIZE:
        raise StoreError(
            f"{path} is a truncated SQLite file ({len(header)} bytes, shorter than a "
            "database header). Restore it from a backup or point the store at another file; "
            "contextfold will not write into it."
        )
    if not _header_is_sound(header):
        raise StoreError(
            f"{path} is damaged or not a SQLite database (its header is not valid). Restore it "
            "from a backup or point the store at another file; contextfold will not write "
            "into it."
        )
    application_id = int.from_bytes(header[_APPLICATION_ID_AT], "big")
    if application_id not in (0, APPLICATION_ID):
        raise _foreign(path, application_id, None)
    return header


def _header_is_sound(header: bytes) -> bool:
    """The header's fixed fields hold what every SQLite file has (fileformat.html: the page
    size, the two format versions, and the payload fractions 64, 32, 32), so its application
    id can be trusted."""
    page_size = int.from_bytes(header[16:18], "big")
    return (
        (page_size == 1 or (512 <= page_size <= 32768 and page_size & (page_size - 1) == 0))
        and header[18] in (1, 2)
        and header[19] in (1, 2)
        and header[21:24] == b"\x40\x20\x20"
    )


def _kind(mode: int) -> str:
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _unwritable(path: Path) -> str | None:
    """Why the store cannot be written here (a read-only file, folder or mount), or None.

    SQLite writes its journal or write-ahead log beside the file, so the folder counts too.
    """
    if not os.access(path, os.W_OK):
        return "the file cannot be written"
    if not os.access(Path(os.path.realpath(path)).parent, os.W_OK | os.X_OK):
        return "its folder cannot be written"
    return None


def _foreign(path: Path, application_id: int, tables: list[str] | None) -> StoreSchemaError:
    what = f"application_id {application_id:#x}"
    if tables is not None:
        what += f", tables {tables[:5]}" if tables else ", no tables"
    return StoreSchemaError(
        f"{path} is a SQLite database contextfold did not create ({what}): another "
        "application's data, which contextfold never writes into. Point the store at a new "
        "file or an existing contextfold store."
    )


def _probe(path: Path, header: bytes, busy_timeout: float, explain: Explain) -> None:
    """Refuse the file unless SQLite reads our application id in it, through a connection
    that cannot write (no recovery, no checkpoint) and leaves nothing behind: a write-ahead
    log file that does not exist yet holds nothing, so then the file alone is read as it is
    (``immutable``), which creates no -wal or -shm file beside it."""
    wal = header[18] == _WAL_FORMAT and not Path(f"{path}-wal").exists()
    try:
        probe = sqlite3.connect(_uri(path, immutable=wal), uri=True, timeout=busy_timeout)
        try:
            application_id, tables = _identity(probe)
        finally:
            probe.close()
    except sqlite3.Error as error:
        raise explain(error) from error
    if application_id != APPLICATION_ID:
        raise _foreign(path, application_id, tables)


def _uri(path: Path, *, immutable: bool = False) -> str:
    target = quote(os.fsencode(os.path.abspath(path)), safe="/")
    return f"file:{target}?mode=ro" + ("&immutable=1" if immutable else "")


def _identity(connection: sqlite3.Connection) -> tuple[int, list[str]]:
    application_id = connection.execute("PRAGMA application_id").fetchone()[0]
    tables = sorted(
        row[0]
        for row in connection.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        )
    )
    return application_id, tables


# -- read-write -----------------------------------------------------------------------------


def _writable(path: Path, busy_timeout: float, explain: Explain) -> sqlite3.Connection:
    """Our store, or a new one at a missing or empty path (another process may be making it
    at the same moment), brought up to date and switched to WAL."""
    folder = Path(os.path.realpath(path)).parent
    if not path.exists() and not os.access(folder, os.W_OK | os.X_OK):
        raise StoreError(f"cannot create the SQLite store {path}: its folder cannot be written")
    try:
        connection = sqlite3.connect(path, timeout=busy_timeout, isolation_level=None)
    except sqlite3.Error as error:
        raise StoreError(f"cannot open the SQLite store {path}: {error}") from None
    try:
        connection.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
        # Ownership is checked again inside the write transaction, before its first write:
        # the file may have been made by another process since it was examined.
        _transaction(connection, lambda c: _settle(c, path))
        # WAL only now: switching rewrites the header, and a file must be ours first.
        mode = connection.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if mode != "wal":
            raise StoreError(f"{path} cannot use WAL journaling (got {mode!r})")
        connection.execute("PRAGMA synchronous = FULL")
        _read_through_mmap(connection)
    except sqlite3.Error as error:
        connection.close()
        raise explain(error) from error
    except BaseException:
        connection.close()
        raise
    return connection


def _read_through_mmap(connection: sqlite3.Connection) -> None:
    # Reads through a memory map instead of a read() call per page: a resume reads a whole
    # session at once (about a third of its time at 10,000 messages otherwise).
    connection.execute(f"PRAGMA mmap_size = {_MMAP_BYTES}")


def _transaction(connection: sqlite3.Connection, body: Callable[[sqlite3.Connection], _T]) -> _T:
    connection.execute("BEGIN IMMEDIATE")
    try:
        result = body(connection)
    except BaseException:
        connection.execute("ROLLBACK")
        raise
    connection.execute("COMMIT")
    return result


def _settle(connection: sqlite3.Connection, path: Path) -> None:
    """Make a new store, or bring ours up to date; refuse anything else untouched."""
    application_id, tables = _identity(connection)
    if application_id == 0 and not tables:
        # Empty: ours from this transaction on. The mark goes in with the tables.
        connection.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    elif application_id != APPLICATION_ID:
        raise _foreign(path, application_id, tables)
    _migrate(connection, set(tables), str(path))


def _migrate(connection: sqlite3.Connection, tables: set[str], where: str) -> None:
    version = _stored_version(connection, tables, where)
    check_version(version, where)
    if version == SCHEMA_VERSION and META_TABLE in tables:
        return
    for steps in SQLITE_MIGRATIONS[version:]:
        for statement in steps:
            connection.execute(statement)
    if 0 < version < SEARCH_INDEX_VERSION:  # messages stored before the index existed
        backfill(connection)
    for statement, parameters in meta_statements(SCHEMA_VERSION, "?"):
        connection.execute(statement, parameters)
    if LEGACY_VERSION_TABLE in tables:
        # Kept in step in a store of ours, so an older contextfold, which reads only this
        # table, still refuses a store newer than it instead of writing into it.
        connection.execute(f"DELETE FROM {LEGACY_VERSION_TABLE}")
        connection.execute(f"INSERT INTO {LEGACY_VERSION_TABLE} VALUES (?)", (SCHEMA_VERSION,))


def _stored_version(connection: sqlite3.Connection, tables: set[str], where: str) -> int:
    if META_TABLE in tables:
        row = connection.execute(
            f"SELECT value FROM {META_TABLE} WHERE key = ?", (META_VERSION_KEY,)
        ).fetchone()
        return read_meta_version(row[0] if row else None, where)
    if LEGACY_VERSION_TABLE in tables:
        row = connection.execute(f"SELECT max(version) FROM {LEGACY_VERSION_TABLE}").fetchone()
        found = row[0] if row and row[0] is not None else 0
        if isinstance(found, bool) or not isinstance(found, int):
            raise StoreSchemaError(f"{where}: its {LEGACY_VERSION_TABLE} table is damaged")
        return found
    return 0


# -- read-only ------------------------------------------------------------------------------


def _open_readable(path: Path, busy_timeout: float, reason: str, explain: Explain) -> Opened:
    try:
        connection = _read_connection(path, busy_timeout, reason)
    except sqlite3.Error as error:
        raise explain(error) from error
    try:
        application_id, tables = _identity(connection)
        if application_id != APPLICATION_ID:
            raise _foreign(path, application_id, tables)
        version = _stored_version(connection, set(tables), str(path))
        check_version(version, str(path))
        if version == SCHEMA_VERSION:
            return Opened(connection, reason)
        return _migrated_copy(connection, path, set(tables), reason)
    except sqlite3.Error as error:
        connection.close()
        raise explain(error) from error
    except BaseException:
        connection.close()
        raise


def _read_connection(path: Path, busy_timeout: float, reason: str) -> sqlite3.Connection:
    """A connection that cannot write. Where the store could be written but has no log
    beside it, an ordinary connection made read-only (the log files it makes go with it);
    elsewhere SQLite's read-only mode, which never checkpoints a log it finds into the file;
    and on a medium where even the log's shared-memory file cannot be made (a WAL store on a
    read-only mount), the file read as it is, when it has no log beside it.
    """
    if reason == READ_ONLY_REQUESTED and not Path(f"{path}-wal").exists():
        connection = sqlite3.connect(path, timeout=busy_timeout, isolation_level=None)
    else:
        connection = sqlite3.connect(_uri(path), uri=True, timeout=busy_timeout)
        connection.isolation_level = None
        try:
            connection.execute("PRAGMA application_id").fetchone()
        except sqlite3.OperationalError as error:
            connection.close()
            if getattr(error, "sqlite_errorname", "") != "SQLITE_CANTOPEN":
                raise
            wal = Path(f"{path}-wal")
            if wal.exists() and wal.stat().st_size > 0:
                raise StoreError(
                    f"the SQLite store {path} is read-only ({reason}) and has a write-ahead "
                    f"log ({wal.name}) SQLite cannot read there; copy the store with its "
                    "-wal file to a writable folder and read the copy"
                ) from None
            connection = sqlite3.connect(_uri(path, immutable=True), uri=True)
            connection.isolation_level = None
    connection.execute("PRAGMA query_only = ON")
    _read_through_mmap(connection)
    return connection


def _migrated_copy(source: sqlite3.Connection, path: Path, tables: set[str], reason: str) -> Opened:
    """An older store that may not be written, read through a private copy brought up to
    date: the file itself is left exactly as it is."""
    folder = Path(tempfile.mkdtemp(prefix="contextfold-read-"))
    try:
        copy = sqlite3.connect(folder / "store.db", isolation_level=None)
        try:
            source.backup(copy)
            source.close()
            _transaction(copy, lambda c: _migrate(c, tables, str(path)))
            copy.execute("PRAGMA query_only = ON")
        except BaseException:
            copy.close()
            raise
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return Opened(copy, f"{reason}; an older layout, read through a migrated copy", folder)
