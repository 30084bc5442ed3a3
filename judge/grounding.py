"""Whether answers hold in the store: the fault's path a trace walks (`features.path.ungrounded`: every hop a link of
the dependency graph, every component on it out of its baseline in the window, the onsets from the cause outward),
and every line an answer quotes, every metric name and number it gives (`reasoner.facts`), against the digest and what
the checks its transcript lists read from the store again."""

from __future__ import annotations

from pathlib import Path

from etl import store
from features.cases import Question
from features.digest import build_digest
from features.evidence import Window
from features.path import ungrounded, walked
from reasoner.batch import transcripts_path
from reasoner.facts import held, known, unfounded
from reasoner.tools import TOOLS, Context, run_tool

from .pages import by_uuid


def grounding(db: Path, questions: list[Question], answers: Path) -> dict:
    """The share of answers whose trace walks a grounded path, of those that walk one, and the share of answers
    that state nothing the store does not hold; what fails where not."""
    answered = by_uuid(answers)
    transcripts = by_uuid(transcripts_path(answers))
    con = store.connect(db, read_only=True)
    found: dict[str, list[str]] = {}
    made_up: dict[str, list[str]] = {}
    try:
        for q in questions:
            a = answered.get(q.uuid)
            if not a:
                continue
            w, digest = Window.around(q.start, q.end), build_digest(con, q)
            path = walked(a)
            if path:
                found[q.uuid] = ungrounded(con, w, digest.ranking, path)
            said = known(con, w, digest, reread(con, q, digest, transcripts.get(q.uuid, {})))
            _, dropped = held(a, said)
            facts = unfounded(str(a.get("reason", "")), said) + [f for d in dropped for f in d["unfounded"]]
            if facts:
                made_up[q.uuid] = facts
    finally:
        con.close()
    told = sum(q.uuid in answered for q in questions)
    return {"grounded": round(sum(not p for p in found.values()) / len(found), 4) if found else None,
            "walked": len(found), "answered": told, "not_grounded": {u: p for u, p in found.items() if p},
            "held": round(1 - len(made_up) / told, 4) if told else None, "unfounded": made_up}


def reread(con, q: Question, digest, transcript: dict) -> list[str]:
    """What the checks a transcript lists read, read again from the store: those the agent could run (a tool it
    has, on a candidate of the digest), so that a transcript names no other read; a check that found nothing read
    nothing (`Result.read`), though its result repeats the keyword it searched for."""
    candidates = {c.component for c in digest.candidates}
    checks = transcript.get("checks") if isinstance(transcript.get("checks"), list) else []
    return [run_tool(Context(con, q), *c).read for c in checks
            if isinstance(c, list) and len(c) == 3 and all(isinstance(x, str) for x in c)
            and c[0] in TOOLS and c[1] in candidates]
