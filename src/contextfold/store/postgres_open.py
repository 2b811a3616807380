"""Finding, making and migrating contextfold's schema in a PostgreSQL database.

A database is shared: other applications keep their tables in it, some with names
contextfold once used too (a ``schema_version`` table is common). contextfold writes only
inside a schema of its own, ``contextfold``, and only when that schema is its own: one it
made (its ``contextfold_meta`` table says so), or an empty one made for it (a database owner
who will not grant CREATE on the database can run ``CREATE SCHEMA contextfold AUTHORIZATION
worker``). A schema of that name holding anything else is refused, untouched.

Stores written before the schema of its own kept their ``cf_*`` tables and a
``schema_version`` table in the connection's current schema (``public``, usually). Such a
store is recognised by its exact table set at the version its ``schema_version`` names
(:func:`contextfold.store.schema.legacy_version`); a read-write opening moves its ``cf_*``
tables into the ``contextfold`` schema (``ALTER TABLE ... SET SCHEMA`` moves their indexes and
sequences along) and leaves ``schema_version`` where it is, unread and unwritten from then
on, since another application may be the one that owns a table of that name.

:func:`settle` runs in one transaction under an advisory lock, so workers starting at once
make or migrate the schema once. Read-only (the inspection commands), it only looks: a
database without a store is an error, and so is a store that would need a migration.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from contextfold.store.base import StoreError, StoreSchemaError
from contextfold.store.postgres_search import backfill
from contextfold.store.schema import (
    LEGACY_DATA_TABLES,
    LEGACY_VERSION_TABLE,
    META_TABLE,
    META_VERSION_KEY,
    POSTGRES_MIGRATIONS,
    POSTGRES_SCHEMA,
    SCHEMA_VERSION,
    SEARCH_INDEX_VERSION,
    check_version,
    legacy_version,
    meta_statements,
    read_meta_version,
)

__all__ = ["settle"]

# Serialises schema checks and migrations of workers starting at the same time.
_MIGRATION_LOCK = 0x63666C64
_META_COLUMNS = ("key", "value")

Connection = psycopg.AsyncConnection[Any]


async def settle(connection: Connection, where: str, *, read_only: bool) -> str:
    """The schema that holds the store, made or brought up to date first unless
    ``read_only``. Call inside a transaction."""
    if not read_only:
        await connection.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
    schema = POSTGRES_SCHEMA
    if await _schema_exists(connection, schema):
        columns = await _columns(connection, schema)
        version: int | None  # None: not a schema an older contextfold made either
        if META_TABLE in columns:
            if columns[META_TABLE] != _META_COLUMNS:
                raise _not_ours(where, schema, sorted(columns))
            version = await _meta_version(connection, schema, where)
        else:
            version = await _legacy(connection, schema, columns)
            if version is None:
                if await _has_objects(connection, schema):
                    raise _not_ours(where, schema, sorted(columns))
                version = 0  # an empty schema made for contextfold
        check_version(version, where)
        if read_only:
            _readable(version, where)
        elif version != SCHEMA_VERSION or META_TABLE not in columns:
            await _migrate(connection, schema, version)
        return schema
    current = await _current_schema(connection)
    found = None
    if current is not None:
        found = await _legacy(connection, current, await _columns(connection, current))
    if read_only:
        if found is None:
            raise StoreError(
                f"{where} holds no contextfold store (no {POSTGRES_SCHEMA} schema); check the "
                "URL's database: nothing was created"
            )
        _readable(found, where)
        assert current is not None
        return current  # read where an older contextfold wrote it
    await _create_schema(connection, schema, where)
    if found is not None:
        assert current is not None
        for table in LEGACY_DATA_TABLES:
            if found >= 2 or table != "cf_documents":
                await connection.execute(
                    sql.SQL("ALTER TABLE {}.{} SET SCHEMA {}").format(
                        sql.Identifier(current), sql.Identifier(table), sql.Identifier(schema)
                    )
                )
    await _migrate(connection, schema, found or 0)
    return schema


def _readable(version: int, where: str) -> None:
    if version < SCHEMA_VERSION:
        raise StoreSchemaError(
            f"{where} holds a contextfold store of schema version {version}, older than this "
            f"contextfold's {SCHEMA_VERSION}. Reading it here would need a migration, which "
            "opening to read never does: open it once read-write (ContextFold(store=...) or "
            "contextfold.store.open_store) to migrate it, then read it."
        )


def _not_ours(where: str, schema: str, tables: list[str]) -> StoreSchemaError:
    return StoreSchemaError(
        f"{where} has a schema named {schema} that contextfold did not create (it holds "
        f"{tables[:5] or 'objects'}, not contextfold's tables); contextfold never writes "
        "into what it did not create. Rename that schema, or give contextfold another database."
    )


async def _schema_exists(connection: Connection, schema: str) -> bool:
    cursor = await connection.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,))
    return await cursor.fetchone() is not None


async def _current_schema(connection: Connection) -> str | None:
    row = await (await connection.execute("SELECT current_schema()")).fetchone()
    return row[0] if row else None


async def _columns(connection: Connection, schema: str) -> dict[str, tuple[str, ...]]:
    """Each table of ``schema`` with its columns in order."""
    rows = await (
        await connection.execute(
            "SELECT table_name::text, array_agg(column_name::text ORDER BY ordinal_position)"
            " FROM information_schema.columns WHERE table_schema = %s GROUP BY table_name",
            (schema,),
        )
    ).fetchall()
    return {name: tuple(columns) for name, columns in rows}


async def _has_objects(connection: Connection, schema: str) -> bool:
    """Whether anything (a table, view, sequence, type, function) lives in ``schema``."""
    row = await (
        await connection.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n"
            "   ON n.oid = c.relnamespace WHERE n.nspname = %s)"
            " OR EXISTS (SELECT 1 FROM pg_type t JOIN pg_namespace n"
            "   ON n.oid = t.typnamespace WHERE n.nspname = %s)"
            " OR EXISTS (SELECT 1 FROM pg_proc p JOIN pg_namespace n"
            "   ON n.oid = p.pronamespace WHERE n.nspname = %s)",
            (schema, schema, schema),
        )
    ).fetchone()
    return bool(row and row[0])


async def _meta_version(connection: Connection, schema: str, where: str) -> int:
    row = await (
        await connection.execute(
            sql.SQL("SELECT value FROM {}.{} WHERE key = %s").format(
                sql.Identifier(schema), sql.Identifier(META_TABLE)
            ),
            (META_VERSION_KEY,),
        )
    ).fetchone()
    return read_meta_version(row[0] if row else None, where)


async def _legacy(
    connection: Connection, schema: str, columns: dict[str, tuple[str, ...]]
) -> int | None:
    """The version of a store an older contextfold wrote in ``schema``, or None."""
    if columns.get(LEGACY_VERSION_TABLE) != ("version",):
        return None
    row = await (
        await connection.execute(
            sql.SQL("SELECT max(version) FROM {}.{}").format(
                sql.Identifier(schema), sql.Identifier(LEGACY_VERSION_TABLE)
            )
        )
    ).fetchone()
    return legacy_version(columns, row[0] if row else None)


async def _create_schema(connection: Connection, schema: str, where: str) -> None:
    try:
        async with connection.transaction():  # a savepoint: the error is ours to explain
            await connection.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    except psycopg.errors.InsufficientPrivilege:
        raise StoreError(
            f"cannot create the schema {schema} in {where} (permission denied). Have the "
            f"database owner run: CREATE SCHEMA {schema} AUTHORIZATION <this user>; "
            "contextfold then keeps its tables there."
        ) from None


async def _migrate(connection: Connection, schema: str, version: int) -> None:
    await connection.execute(sql.SQL("SET LOCAL search_path TO {}").format(sql.Identifier(schema)))
    for steps in POSTGRES_MIGRATIONS[version:]:
        for statement in steps:
            await connection.execute(statement)
    if 0 < version < SEARCH_INDEX_VERSION:  # messages stored before the index existed
        await backfill(connection)
    for statement, parameters in meta_statements(SCHEMA_VERSION, "%s"):
        await connection.execute(statement, parameters)
