"""What adapters share: the input file record, the query record and identifier quoting.

Nothing from a dump is pasted into SQL: paths and names are bound as named parameters
(`$path`, ...), and a column name that must appear as an identifier goes through `ident`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class InputFile:
    path: Path
    kind: str  # metric | log | trace | calls | k8s | skip | unreadable (its load fails with the reason)
    reason: str = ""  # why a file is skipped or cannot be read


@dataclass(frozen=True)
class Query:
    """A SELECT of one file's rows in canonical columns (without file_id) and its named parameters; for a kind that
    fills several tables, a SELECT per table. `frames` are rows an adapter read itself (Arrow tables), which the
    SELECTs read by name."""
    sql: str | dict[str, str]
    params: dict = field(default_factory=dict)
    rejects: bool = False  # malformed rows are left out and listed in DuckDB's `reject_errors`
    frames: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what the manifest says of parts of the file left out


def ident(name: str) -> str:
    """A SQL identifier for any column name: double-quoted, inner quotes doubled."""
    return '"' + name.replace('"', '""') + '"'


def record_text(column: str) -> str:
    """The words of a log line for its template: a JSON record's severity, level, message and error fields (a
    structured logger's line), the line itself otherwise."""
    return (f"case when json_valid({column}) then concat_ws(' ', json_extract_string({column}, '$.severity'), "
            f"json_extract_string({column}, '$.level'), json_extract_string({column}, '$.message'), "
            f"json_extract_string({column}, '$.error')) else {column} end")
