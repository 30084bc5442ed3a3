"""What an answer states as fact, and whether the store holds it: every line it quotes, every metric name and every
number. A quoted line is held where a log line of the window has all its words (an error is quoted by its clauses,
not whole) or the evidence quotes it; a name or a number where the evidence the store gave for the window states it
(the digest, each candidate's steps, the checks the model read), or, for a name, where the store has a series of
that name. A fact held nowhere was made up: the answer may not state it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import duckdb

from features.digest import Digest
from features.evidence import Window

from .rank import evidence_steps, reason, where_felt

QUOTE = re.compile(r"'([^']{3,})'")
NUMBER = re.compile(r"(?<![\w.:])\d+(?:[.:]\d+)*[kMG%]?(?![\w])")  # 1.9, 1.1k, 40%, 10:05
NAME = re.compile(r"\b[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+\b")  # a metric as dumps name them: pod_cpu_usage
WORD = re.compile(r"[a-z0-9]{3,}")


@dataclass
class Known:
    """What the store gave for a case's window: every line of its evidence, and where to read its log lines."""
    con: duckdb.DuckDBPyConnection
    window: Window
    text: str

    @cached_property
    def lower(self) -> str:
        return self.text.lower()

    @cached_property
    def tokens(self) -> set[str]:
        """The names (in lower case) and the numbers (as written: 1.6M is no 1.6m) the evidence states."""
        return {n.lower() for n in NAME.findall(self.text)} | set(NUMBER.findall(self.text))

    def holds(self, fact: str, quoted: bool) -> bool:
        if quoted:
            return fact.lower() in self.lower or self._logged(fact)
        if NAME.fullmatch(fact):
            return fact.lower() in self.tokens or self._series(fact)
        return fact in self.tokens

    def _logged(self, quote: str) -> bool:
        words = sorted(set(WORD.findall(quote.lower())))
        return bool(words) and bool(self.con.execute("""
            select 1 from log_lines where ts between ? and ?
              and list_bool_and(list_transform(?, lambda w: contains(lower(message), w))) limit 1""",
                                                     [self.window.start, self.window.end, words]).fetchall())

    def _series(self, name: str) -> bool:
        return bool(self.con.execute("select 1 from metric_points where metric = ? and ts between ? and ? limit 1",
                                     [name, self.window.start, self.window.end]).fetchall())


def known(con: duckdb.DuckDBPyConnection, w: Window, digest: Digest, read: Sequence[str] = ()) -> Known:
    """The evidence of a digest of window `w` (its text, every candidate's items and steps) and the checks'
    results `read`."""
    said = [digest.text, *read]
    for c in digest.candidates:
        evidence, felt = c.found or c.evidence, where_felt(digest, c.component)
        said += [f"{e.text}\n{e.line}\n{e.key}" for e in evidence]
        said += [f"{s['action']}\n{s['observation']}" for s in evidence_steps(digest, c.component)]
        said += [reason(c.component, o.fault_type, o.key, evidence, felt=felt)
                 for o in digest.options.get(c.component, [])]
    return Known(con, w, "\n".join(said))


def facts(text: str) -> list[tuple[str, bool]]:
    """The facts a text states: (each quoted line, True), then (each metric name and number outside quotes, False)."""
    rest = QUOTE.sub(" ", text)
    return [(q, True) for q in QUOTE.findall(text)] + [
        (f, False) for f in dict.fromkeys(NAME.findall(rest) + NUMBER.findall(rest))]


def unfounded(text: str, known: Known) -> list[str]:
    """The facts `text` states that the store does not hold."""
    return [fact for fact, quoted in facts(text) if not known.holds(fact, quoted)]


def held(answer: dict, known: Known) -> tuple[dict, list[dict]]:
    """The answer without the steps of its trace that state what the store does not hold (renumbered), and what
    was dropped: each step's action and the facts it made up."""
    kept, dropped = [], []
    for s in answer["reasoning_trace"]:
        made_up = unfounded(f"{s['action']} {s['observation']}", known)
        if made_up:
            dropped.append({"action": s["action"], "unfounded": made_up})
        else:
            kept.append(s)
    return {**answer, "reasoning_trace": [{**s, "step": i} for i, s in enumerate(kept, 1)]}, dropped
