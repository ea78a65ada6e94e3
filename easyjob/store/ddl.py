"""The schema as readable DDL for each backend, rendered from :mod:`easyjob.store.schema`.

``python -m easyjob.store.ddl --write sql`` regenerates ``sql/*.sql``; a test fails when those
files drift from the definitions. ``easyjob sql --dialect D`` prints the same text.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sqlalchemy.engine import Dialect
from sqlalchemy.schema import CreateIndex, CreateTable

from easyjob.errors import ConfigError
from easyjob.store import dialects
from easyjob.store.migrations import revisions, version_table_def
from easyjob.store.schema import COMPATIBLE_FROM_VERSION, SCHEMA_VERSION, meta_table, metadata

__all__ = ["DIALECTS", "render"]

DIALECTS: dict[str, Dialect] = {d.name: d.offline() for d in dialects.DIALECTS}


def render(dialect: str) -> str:
    """The complete DDL for *dialect* (``sqlite``, ``postgresql`` or ``mysql``)."""
    if dialect not in DIALECTS:
        raise ConfigError(
            f"unknown SQL dialect {dialect!r}: choose one of {', '.join(map(repr, DIALECTS))}"
        )
    engine_dialect = DIALECTS[dialect]
    parts = [
        f"-- easyjob schema version {SCHEMA_VERSION} for {dialect}.",
        "-- Generated from easyjob/store/schema.py by `make sql`; do not edit by hand.",
        "-- Every column is documented in docs/schema.md.",
        "",
    ]
    for table in metadata.sorted_tables:
        create = str(CreateTable(table).compile(dialect=engine_dialect)).strip()
        parts.append(create + ";\n")
        for index in sorted(table.indexes, key=lambda i: str(i.name)):
            parts.append(str(CreateIndex(index).compile(dialect=engine_dialect)).strip() + ";\n")
    parts.append(
        f"INSERT INTO {meta_table.name} (name, value) "
        f"VALUES ('schema_version', '{SCHEMA_VERSION}');\n"
        f"INSERT INTO {meta_table.name} (name, value) "
        f"VALUES ('compatible_from', '{COMPATIBLE_FROM_VERSION}');\n"
    )
    parts.append("-- Alembic's record of the same version, for `easyjob upgrade-db` later.")
    version_table = version_table_def()
    parts.append(str(CreateTable(version_table).compile(dialect=engine_dialect)).strip() + ";")
    parts.append(
        f"INSERT INTO {version_table.name} (version_num) VALUES ('{revisions()[SCHEMA_VERSION]}');"
    )
    text = "\n".join(parts) + "\n"
    return "\n".join(line.rstrip() for line in text.splitlines()) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", metavar="DIR", help="write DIR/<dialect>.sql for each dialect")
    parser.add_argument("--dialect", choices=sorted(DIALECTS), default="sqlite")
    args = parser.parse_args(argv)
    if args.write:
        for name in DIALECTS:
            Path(args.write, f"{name}.sql").write_text(render(name), encoding="utf-8")
        return 0
    sys.stdout.write(render(args.dialect))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
