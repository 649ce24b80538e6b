"""Many rows in one statement: the rows travel as one JSON document and the database turns
them back into a table (``json_each`` on SQLite, ``jsonb_to_recordset`` on PostgreSQL).

This is what keeps the hot paths cheap. Writing the state of 500 executions costs one
statement and one round trip, not 500; and the compare-and-set of each row stays exact,
because the statement says which rows it changed (``RETURNING eid``).

Values are encoded here, once, in the form each database stores: times as SQLite's text
(``YYYY-MM-DD HH:MM:SS.ffffff``, UTC) or as RFC 3339 for PostgreSQL, JSON columns as their
JSON text.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import orjson
import sqlalchemy as sa

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


@dataclass(frozen=True, slots=True)
class Rows:
    """A batch of rows as one statement parameter, for one dialect."""

    dialect: str
    columns: Mapping[str, Kind]

    def source(self, alias: str = "v") -> str:
        """The FROM item that turns the ``:rows`` parameter into a table called ``alias``."""
        if self.dialect == "postgresql":
            typed = ", ".join(f"{name} {_PG_TYPES[kind]}" for name, kind in self.columns.items())
            return f"jsonb_to_recordset(CAST(:rows AS jsonb)) AS {alias}({typed})"
        picked = ", ".join(f"value ->> '{name}' AS {name}" for name in self.columns)
        return f"(SELECT {picked} FROM json_each(:rows)) AS {alias}"  # noqa: S608 (names only)

    def value(self, name: str, alias: str = "v") -> str:
        """The SQL expression of column ``name`` of the batch (JSON columns cast back)."""
        if self.dialect == "postgresql" and self.columns[name] == "json":
            return f"CAST({alias}.{name} AS json)"
        return f"{alias}.{name}"

    def encode(self, rows: Iterable[Mapping[str, Any]]) -> str:
        """The ``:rows`` parameter: every row, each value in the form the database stores."""
        time_text = _pg_time if self.dialect == "postgresql" else _sqlite_time
        times = [name for name, kind in self.columns.items() if kind == "time"]
        documents = [name for name, kind in self.columns.items() if kind == "json"]
        plain = [name for name in self.columns if name not in times and name not in documents]
        texts: dict[datetime, str] = {}  # a batch repeats its times (claimed, due at once)
        out = []
        for row in rows:
            item = {name: row[name] for name in plain}
            for name in times:
                when = row[name]
                if when is None:
                    item[name] = None
                    continue
                text = texts.get(when)
                if text is None:
                    text = texts[when] = time_text(when)
                item[name] = text
            for name in documents:
                value = row[name]
                item[name] = None if value is None else _json_text(value)
            out.append(item)
        return orjson.dumps(out).decode()


def _json_text(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except TypeError:  # e.g. an integer beyond 64 bits, which orjson refuses
        return json.dumps(value, default=str)


def insert_rows(
    table: sa.Table, rows: Rows, *, returning: str | None = None, skip_conflicts: bool = True
) -> sa.TextClause:
    """``INSERT INTO table (...) SELECT ... FROM <rows>``, skipping rows whose unique keys are
    taken (``ON CONFLICT DO NOTHING``), returning ``returning`` of the rows inserted."""
    names = list(rows.columns)
    values = ", ".join(rows.value(name) for name in names)
    # Only column names of ecron's own tables go into the text; every value is a parameter.
    sql = f"INSERT INTO {table.name} ({', '.join(names)}) SELECT {values} FROM {rows.source()}"  # noqa: S608
    if rows.dialect == "sqlite":
        sql += " WHERE true"  # SQLite: an upsert after a SELECT needs a WHERE to parse
    if skip_conflicts:
        sql += " ON CONFLICT DO NOTHING"
    if returning is not None:
        sql += f" RETURNING {returning}"
    return sa.text(sql)


def update_rows(
    table: sa.Table,
    rows: Rows,
    *,
    key: Sequence[str],
    match: Sequence[str] = (),
    set_columns: Sequence[str],
    keep_when_null: Sequence[str] = (),
    extra: str = "",
    where: str = "",
    returning: str,
) -> sa.TextClause:
    """``UPDATE table SET ... FROM <rows> WHERE`` each row meets its batch row on ``key``
    (and on ``match``: the compare-and-set columns), ``RETURNING returning``.

    Columns in ``keep_when_null`` keep their stored value where the batch row holds null.
    ``extra`` is added to the SET list as it is (e.g. ``version = version + 1``), and
    ``where`` to the conditions (SQL text; bind its parameters on the returned clause).
    """
    assignments = []
    for name in set_columns:
        value = rows.value(name)
        if name in keep_when_null:
            value = f"COALESCE({value}, {table.name}.{name})"
        assignments.append(f"{name} = {value}")
    if extra:
        assignments.append(extra)
    conditions = [f"{table.name}.{name} = v.{name}" for name in (*key, *match)]
    if where:
        conditions.append(f"({where})")
    # Only column names of ecron's own tables go into the text; every value is a parameter.
    sql = f"UPDATE {table.name} SET {', '.join(assignments)} FROM {rows.source()} "  # noqa: S608
    sql += f"WHERE {' AND '.join(conditions)} RETURNING {table.name}.{returning}"
    return sa.text(sql)
