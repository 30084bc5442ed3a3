"""What adapters share: the input file record and SQL quoting."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class InputFile:
    path: Path
    kind: str  # metric | log | trace | skip
    reason: str = ""  # why a file is skipped


def sql_path(path: Path) -> str:
    return str(path).replace("'", "''")
