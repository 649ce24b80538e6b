"""Many rows per statement, each still exact: what keeps the hot paths cheap.

Writing the state of 500 executions costs one round trip, not 500, and the
compare-and-set of each row stays exact. How depends on the database, decided here once:

- **PostgreSQL**: the rows travel as one JSON document that the statement turns back
  into a table (``jsonb_to_recordset``), and ``RETURNING`` says which rows it changed.
  An update first locks the rows it names in the order of their key (a ``FOR UPDATE``
  ordered by it, in the same statement), whatever order the rows came in and whatever
  join the planner picks: two statements that lock some of the same rows take them in
  one order, so a node's own writers (progress saves, ends, starts, takeovers) never
  deadlock one another (DESIGN.md, "Scale"). Rows found by one key are named by an array
  of its values as well (``= ANY(...)``), so that every plan, a generic one made when the
  table was small included, reads them along the key's index, never the whole table.
- **SQLite** (in-process, so a statement costs no network): one ``executemany`` of a
  plain parameterised statement, which SQLite runs in C at a few microseconds a row
  (JSON would be parsed again for every column of every row). A compare-and-set reads
  the rows' fence and version first, in the same transaction: SQLite's one writer at a
  time (``BEGIN IMMEDIATE``) means nothing can change them in between.

Values are encoded here, once, in the form each database stores: times as SQLite's text
(``YYYY-MM-DD HH:MM:SS.ffffff``, UTC) or as RFC 3339 for PostgreSQL, JSON columns as their
JSON text.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

import orjson
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

Kind = Literal["text", "int", "float", "bool", "time", "json"]

#: PostgreSQL's type for each kind, in ``jsonb_to_recordset``'s column list.
_PG_TYPES: dict[Kind, str] = {
    "text": "text",
    "int": "bigint",
    "float": "double precision",
    "bool": "boolean",
    "time": "timestamptz",
    "json": "text",
}
#: At most this many values go into one ``IN (...)`` list on SQLite.
_IN_CHUNK = 500


def _aware(when: datetime) -> datetime:
    if when.tzinfo is None:
        raise ValueError(f"naive datetime {when!r}: ecron stores aware UTC times only")
    return when


def _sqlite_time(when: datetime) -> str:
    """How SQLAlchemy stores a UTC time on SQLite (so comparisons and reads agree):
    ``YYYY-MM-DD HH:MM:SS.ffffff``, naive UTC."""
    if when.tzinfo is not UTC:
        when = _aware(when).astimezone(UTC)
    return when.isoformat(sep=" ", timespec="microseconds")[:26]  # without "+00:00"


def _pg_time(when: datetime) -> str:
    return _aware(when).isoformat()


def _json_text(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except TypeError:  # e.g. an integer beyond 64 bits, which orjson refuses
        return json.dumps(value, default=str)


@dataclass(frozen=True, slots=True)
class Guard:
    """A condition a write lands under, besides each row's own compare: ``sql`` over
    ``params`` (as SQL text, for PostgreSQL's statement), and ``check``, the same question
    asked on its own in the writing transaction (SQLite: no other writer can change the
    answer before the update). For fenced writes: the writing node's lease still has the
    epoch the write was made under."""

    sql: str
    params: Mapping[str, Any]
    check: sa.Select[Any]

    async def holds(self, conn: AsyncConnection) -> bool:
        """True when the condition holds now, in ``conn``'s transaction."""
        return (await conn.execute(self.check)).first() is not None


@dataclass(frozen=True, slots=True)
class Batch:
    """Rows of one table, written many per statement (see the module docstring).

    ``columns``: the batch's fields and their kinds. ``key``: the fields that find a row;
    ``match``: the compare-and-set fields that must equal the row's; ``assign``: column ->
    the field it is set from (``keep_when_null``: columns that keep their value where the
    field is null); ``also``: further assignments, as SQL (e.g. ``version = version + 1``);
    ``where``: a further condition, as SQL over the table's own columns.
    """

    dialect: str
    table: str
    columns: Mapping[str, Kind]
    key: Sequence[str] = ()
    match: Sequence[str] = ()
    assign: Mapping[str, str] = field(default_factory=dict)
    keep_when_null: Sequence[str] = ()
    also: str = ""
    where: str = ""
    #: Decided once, when the batch is made (by the store, when it opens).
    _postgres: bool = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_postgres", self.dialect == "postgresql")

    # -- values -----------------------------------------------------------------------------

    def encode(self, rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        """``rows`` (dicts of this batch's fields, changed in place) with every value in the
        form the database stores."""
        time_text = _pg_time if self._postgres else _sqlite_time
        times = [name for name, kind in self.columns.items() if kind == "time"]
        documents = [name for name, kind in self.columns.items() if kind == "json"]
        texts: dict[datetime, str] = {}  # a batch repeats its times (claimed, due at once)
        out = []
        for row in rows:
            for name in times:
                when = row[name]
                if when is not None:
                    text = texts.get(when)
                    if text is None:
                        text = texts[when] = time_text(when)
                    row[name] = text
            for name in documents:
                value = row[name]
                if value is not None:
                    row[name] = _json_text(value)
            out.append(row)
        return out

    # -- writing --------------------------------------------------------------------------

    async def insert(
        self, conn: AsyncConnection, rows: Iterable[dict[str, Any]], returning: str
    ) -> set[Any]:
        """Insert the rows, skipping those whose unique keys are taken; the ``returning``
        field of the rows inserted (it must be unique to each row, like a new eid)."""
        encoded = self.encode(rows)
        if not encoded:
            return set()
        names = list(self.columns)
        if self._postgres:
            values = ", ".join(self._pg_value(name) for name in names)
            sql = (
                f"INSERT INTO {self.table} ({', '.join(names)}) SELECT {values} "
                f"FROM {self._pg_source()} ON CONFLICT DO NOTHING RETURNING {returning}"
            )
            result = await conn.execute(sa.text(sql), {"rows": orjson.dumps(encoded).decode()})
            return set(result.scalars())
        marks = ", ".join("?" for _ in names)
        sql = f"INSERT INTO {self.table} ({', '.join(names)}) VALUES ({marks})"
        sql += " ON CONFLICT DO NOTHING"
        result = await conn.exec_driver_sql(sql, [tuple(row[n] for n in names) for row in encoded])
        wanted = [row[returning] for row in encoded]
        if result.rowcount == len(encoded):
            return set(wanted)
        return await self._present(conn, returning, wanted)

    async def update(
        self,
        conn: AsyncConnection,
        rows: Iterable[dict[str, Any]],
        returning: str,
        guard: Guard | None = None,
    ) -> set[Any]:
        """Update each row found by ``key`` whose ``match`` fields are as given (and that
        meets ``where``), only while ``guard`` holds (none is updated when it does not);
        the ``returning`` field (a key field) of the rows updated."""
        encoded = self.encode(rows)
        if not encoded:
            return set()
        if self._postgres:
            params: dict[str, Any] = {"rows": orjson.dumps(encoded).decode()}
            if self._by_array:
                params["keys"] = [row[self.key[0]] for row in encoded]
            if guard is not None:
                params.update(guard.params)
            sql = self._pg_update(returning, None if guard is None else guard.sql)
            return set((await conn.execute(sa.text(sql), params)).scalars())
        if guard is not None and not await guard.holds(conn):
            return set()
        if self.match or self.where:
            encoded = await self._still_matching(conn, encoded)
        if not encoded:
            return set()
        fields = [*self.assign.values(), *self.key, *self.match]
        await conn.exec_driver_sql(
            self._sqlite_update(), [tuple(row[f] for f in fields) for row in encoded]
        )
        return {row[returning] for row in encoded}

    # -- PostgreSQL -----------------------------------------------------------------------

    @property
    def _by_array(self) -> bool:
        """The rows are named by one key of text or numbers (an array of its values)."""
        return len(self.key) == 1 and self.columns[self.key[0]] in ("text", "int")

    def _pg_source(self) -> str:
        typed = ", ".join(f"{name} {_PG_TYPES[kind]}" for name, kind in self.columns.items())
        return f"jsonb_to_recordset(CAST(:rows AS jsonb)) AS v({typed})"

    def _pg_value(self, name: str) -> str:
        if self.columns[name] == "json":
            return f"CAST(v.{name} AS json)"
        return f"v.{name}"

    def _pg_update(self, returning: str, guard: str | None = None) -> str:
        keys = ", ".join(self.key)
        # The rows named: by one key, as an array of its values, which the planner reads
        # along the key's index whatever it believes of the table (a plan made when the
        # table was small, and kept, scanned all of it at every write once it had grown:
        # 24 ms a statement at 31,000 rows); by several, joined with the rows given.
        if self._by_array:
            named = f"{self.table}.{keys} = ANY(CAST(:keys AS {_PG_TYPES[self.columns[keys]]}[]))"
        else:
            named = f"({keys}) IN (SELECT {keys} FROM v)"
        locked = (  # every row named, locked in the order of its key before any is changed
            f"SELECT {keys} FROM {self.table} WHERE {named} ORDER BY {keys} FOR UPDATE"
        )
        sets = []
        for column, source in self.assign.items():
            value = self._pg_value(source)
            if column in self.keep_when_null:
                value = f"COALESCE({value}, {self.table}.{column})"
            sets.append(f"{column} = {value}")
        if self.also:
            sets.append(self.also)
        conditions = [f"{self.table}.{name} = v.{name}" for name in (*self.key, *self.match)]
        conditions.append(
            f"({', '.join(f'{self.table}.{k}' for k in self.key)}) IN (SELECT {keys} FROM locked)"
        )
        if self.where:
            conditions.append(f"({self.where})")
        if guard:
            conditions.append(f"({guard})")
        return (
            f"WITH v AS (SELECT * FROM {self._pg_source()}), locked AS ({locked}) "
            f"UPDATE {self.table} SET {', '.join(sets)} FROM v "
            f"WHERE {' AND '.join(conditions)} RETURNING {self.table}.{returning}"
        )

    # -- SQLite ---------------------------------------------------------------------------

    def _sqlite_update(self) -> str:
        sets = []
        for column in self.assign:
            value = f"COALESCE(?, {column})" if column in self.keep_when_null else "?"
            sets.append(f"{column} = {value}")
        if self.also:
            sets.append(self.also)
        conditions = [f"{name} = ?" for name in (*self.key, *self.match)]
        return f"UPDATE {self.table} SET {', '.join(sets)} WHERE {' AND '.join(conditions)}"

    async def _still_matching(
        self, conn: AsyncConnection, rows: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """The rows whose ``match`` fields equal the stored row's and that meet ``where``
        (read in the writing transaction: no other writer can change them before the
        update)."""
        (key,) = self.key
        found: dict[Any, tuple[Any, ...]] = {}
        condition = f" AND ({self.where})" if self.where else ""
        for start in range(0, len(rows), _IN_CHUNK):
            chunk = [row[key] for row in rows[start : start + _IN_CHUNK]]
            marks = ", ".join("?" for _ in chunk)
            picked = ", ".join([key, *self.match])
            sql = f"SELECT {picked} FROM {self.table} WHERE {key} IN ({marks}){condition}"
            for stored in await conn.exec_driver_sql(sql, tuple(chunk)):
                found[stored[0]] = tuple(stored[1:])
        return [
            row
            for row in rows
            if row[key] in found and found[row[key]] == tuple(row[m] for m in self.match)
        ]

    async def _present(self, conn: AsyncConnection, column: str, values: list[Any]) -> set[Any]:
        present: set[Any] = set()
        for start in range(0, len(values), _IN_CHUNK):
            chunk = values[start : start + _IN_CHUNK]
            marks = ", ".join("?" for _ in chunk)
            sql = f"SELECT {column} FROM {self.table} WHERE {column} IN ({marks})"
            present.update(row[0] for row in await conn.exec_driver_sql(sql, tuple(chunk)))
        return present
