"""Diagnose many cases: resumable, concurrent, with one transcript line per case.

Answers go to ANSWERS (challenge JSONL, one line per answered case); transcripts to
ANSWERS with `.transcripts.jsonl` in place of `.jsonl`. A rerun skips uuids already
answered or tried without an answer (no candidates); a torn last line (a run killed while writing) is cut off first. With no chat
function, the `rank` agent answers. Where the model fails, the ranking's answer is written
and its transcript says `fallback`; only a case without candidates has no answer.
"""

from __future__ import annotations

import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from common.errors import OutputError, check_output, read_text
from etl import store
from etl.store import exclusive
from features.cases import Question

from .agent import Chat, diagnose, rank_only
from .cluster import SECONDS, snapshot_answer


@dataclass
class BatchReport:
    answered: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)  # no answer at all (no candidates)
    fallback: list[tuple[str, str]] = field(default_factory=list)  # the model failed; the ranking's answer stands
    incomplete: list[tuple[str, str]] = field(default_factory=list)  # answered from a window lacking features
    skipped: int = 0


def transcripts_path(answers: Path) -> Path:
    answers = Path(answers)
    return answers.with_name(answers.name.removesuffix(".jsonl") + ".transcripts.jsonl")


def cut_torn_line(path: Path) -> None:
    """A run killed while writing leaves a last line without its newline: it is removed."""
    if not path.exists():
        return
    with open(path, "r+b") as f:
        data = f.read()
        if data and not data.endswith(b"\n"):
            f.truncate(data.rfind(b"\n") + 1)


def tried_uuids(path: Path) -> set[str]:
    """uuids a transcripts file says were tried and could not be answered (no candidates): a rerun moves on."""
    path = Path(path)
    if not path.exists():
        return set()
    tried = set()
    for line in read_text(path).splitlines():
        try:
            row = json.loads(line)
            if row["status"] == "failed":
                tried.add(row["uuid"])
        except (json.JSONDecodeError, RecursionError, KeyError, TypeError):
            continue
    return tried


def answered_uuids(path: Path) -> set[str]:
    """uuids already in an answers file; a torn last line is removed."""
    path = Path(path)
    if not path.exists():
        return set()
    cut_torn_line(path)
    done = set()
    for line in read_text(path).splitlines():
        try:
            done.add(json.loads(line)["uuid"])
        except (json.JSONDecodeError, RecursionError, KeyError, TypeError):
            continue
    return done


class _Appender:
    """Whole lines, flushed and synced one at a time, from any thread."""

    def __init__(self, path: Path):
        self.file = open(path, "ab")
        self.lock = threading.Lock()

    def write(self, obj: dict) -> None:
        # A lone surrogate (an endpoint's broken text) cannot be UTF-8: it is written as '?', the line stays whole.
        line = (json.dumps(obj, ensure_ascii=False) + "\n").encode("utf-8", "replace")
        with self.lock:
            self.file.write(line)
            self.file.flush()
            os.fsync(self.file.fileno())

    def close(self) -> None:
        self.file.close()


def run_batch(db: Path, questions: list[Question], answers: Path, chat: Chat | None, *, model: str = "",
              concurrency: int = 1, limit: int | None = None, progress: Callable[[str], None] | None = None,
              **settings) -> BatchReport:
    """Answer the questions not answered yet into `answers`; `settings` go to the llm agent (`diagnose`)."""
    answers = Path(answers)
    for path in (answers, transcripts_path(answers)):
        check_output(path, db)
    try:
        answers.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"cannot create {answers.parent}: {e.strerror}") from None
    with exclusive(answers, "diagnose run"):
        return _run(db, questions, answers, chat, model, concurrency, limit, progress, settings)


def _run(db, questions, answers, chat, model, concurrency, limit, progress, settings) -> BatchReport:
    report = BatchReport()
    done = answered_uuids(answers)
    cut_torn_line(transcripts_path(answers))
    done |= tried_uuids(transcripts_path(answers))
    todo = [q for q in questions if q.uuid not in done]
    report.skipped = len(questions) - len(todo)
    if limit is not None:
        todo = todo[:limit]
    con = store.connect(db, read_only=True)
    out, log = _Appender(answers), _Appender(transcripts_path(answers))
    # Digests are computed by the machine's cores: no more built at once than it has; model requests may all be out.
    digests = threading.BoundedSemaphore(os.cpu_count() or 1)

    def one(q: Question) -> None:
        cursor = store.cursor(con)
        cursor.execute("set TimeZone = 'UTC'")  # a cursor is a session of its own
        if q.snapshot:  # a frozen cluster's state: its objects answer; the model, where they leave a choice
            outcome = snapshot_answer(cursor, q, chat, model, min(settings.get("time_limit", SECONDS), SECONDS))
        elif chat is None:  # the rank agent
            outcome = rank_only(cursor, q, digests)
        else:
            outcome = diagnose(chat, cursor, q, model=model, gate=digests, **settings)
        log.write(outcome.transcript)
        if outcome.transcript["features_missing"]:
            report.incomplete.append((q.uuid, f"the features of {', '.join(outcome.transcript['features_missing'])} "
                                              "were not computed; run 'rcalab etl' on the dump again"))
        if outcome.answer:
            out.write(outcome.answer)
            report.answered += 1
            if outcome.transcript["status"] == "fallback":
                report.fallback.append((q.uuid, outcome.error or ""))
        else:
            report.failed.append((q.uuid, outcome.error or "no answer"))
        if progress:
            progress(q.uuid)

    try:
        with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
            list(pool.map(one, todo))
    finally:
        out.close()
        log.close()
        con.close()
    return report
