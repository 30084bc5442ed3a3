"""Whether the fault's paths that answers walk hold in the store (`features.path.ungrounded`): every hop a link of
the dependency graph, every component on it out of its baseline in the window, the onsets from the cause outward."""

from __future__ import annotations

from pathlib import Path

from etl import store
from features.cases import Question
from features.detect import CANDIDATES
from features.evidence import Window
from features.path import ungrounded, walked
from features.ranker import rank_window

from .pages import by_uuid


def grounding(db: Path, questions: list[Question], answers: Path) -> dict:
    """The share of answers whose trace walks a grounded path, of those that walk one; and what fails where not."""
    answered = by_uuid(answers)
    con = store.connect(db, read_only=True)
    found: dict[str, list[str]] = {}
    try:
        for q in questions:
            path = walked(answered.get(q.uuid) or {})
            if path:
                w = Window.around(q.start, q.end)
                found[q.uuid] = ungrounded(con, w, rank_window(con, w, CANDIDATES), path)
    finally:
        con.close()
    return {"grounded": round(sum(not p for p in found.values()) / len(found), 4) if found else None,
            "walked": len(found), "answered": sum(q.uuid in answered for q in questions),
            "not_grounded": {uuid: problems for uuid, problems in found.items() if problems}}
