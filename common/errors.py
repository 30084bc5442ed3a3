"""Every error rcalab raises on purpose. Each message names the file, row or field at fault; the
readers of text files here turn an unreadable file into such an error."""

import json
import re
from pathlib import Path


class RcalabError(Exception):
    """Base class: the command line turns these into one line on stderr and exit status `exit_code`."""

    exit_code = 1


class ScheduleError(RcalabError):
    """A fault schedule (ground-truth file) that cannot be replayed."""


class DescriptionError(RcalabError):
    """A system description (testbed/systems/*.yaml or a user's) that cannot be simulated."""


class OutputError(RcalabError):
    """An output location that cannot be written."""


class StoreError(RcalabError):
    """A feature store that cannot be opened."""


class StoreBusy(StoreError):
    """A store or answers file another process is using: nothing is wrong with it; try again later."""

    exit_code = 75  # EX_TEMPFAIL (sysexits.h): a temporary failure, worth retrying


class DumpError(RcalabError):
    """A dump whose layout or format cannot be read."""


class LoadError(RcalabError):
    """One input file that cannot be loaded; the rest of the load goes on."""


class LLMError(RcalabError):
    """The language model cannot be reached, started or understood."""


# What a terminal would obey rather than show: C0 and C1 controls (ESC starts its escape sequences, BEL ends an OSC
# title) and the marks that reorder text (bidirectional overrides, embeddings, isolates).
_OBEYED = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def shown(text) -> str:
    """Text for a terminal: every character it would obey instead of show is written as its escape (ESC as
    \\x1b, a right-to-left override as \\u202e); lines and tabs stay."""
    return _OBEYED.sub(lambda m: ascii(m.group())[1:-1], str(text))


def read_text(path: Path) -> str:
    """A UTF-8 text file; errors name the file."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise RcalabError(f"cannot read {path}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise RcalabError(f"{path}: not UTF-8 text (byte {e.start})") from None


def read_json(path: Path):
    try:
        return json.loads(read_text(path))
    except json.JSONDecodeError as e:
        raise RcalabError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None
    except RecursionError:
        raise RcalabError(f"{path}: JSON nested too deeply to read") from None


def check_output(path: Path, db: Path, opens: bytes = b"{", kind: str = "an answers file (JSON lines)") -> None:
    """An output file that exists must be of its kind (its text `opens` so): a store, a parquet file, a pipe or any
    other file named by mistake is refused before anything cuts, appends to or replaces it."""
    path = Path(path)
    if not path.exists():
        return
    if path.is_dir() or not path.is_file():
        raise OutputError(f"{path} is not a regular file; name {kind} with --out")
    if path.resolve() == Path(db).resolve():
        raise OutputError(f"{path} is the store itself; name {kind} with --out")
    with open(path, "rb") as f:
        head = f.read(4096)
    if b"\0" in head or (head.strip() and not head.lstrip().startswith(opens)):
        raise OutputError(f"{path} exists and is not {kind}; name another file with --out")
