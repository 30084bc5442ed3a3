"""Cloud-OpsBench's scoring: a prediction is right when its fault taxonomy, object and root cause all equal the
case's label (lower-cased); A@1 from the first of an answer's `top_3_predictions`, A@3 from any of three. The partial
matches count the object alone and the root cause alone at the first prediction. The labels are the case folders'
`metadata.json` (`result`), read here and nowhere else."""

from __future__ import annotations

import json
from pathlib import Path

from common.errors import RcalabError
from etl.adapters.cloudopsbench import cases, snapshot

from .scoring import read_jsonl

FIELDS = ("fault_taxonomy", "fault_object", "root_cause")
MEASURES = ("A@1", "A@3", "object@1", "cause@1", "cases", "answered")


def labels(root: Path) -> dict[str, tuple[str, str, str]]:
    """Each case's label by its uuid (SYSTEM/CATEGORY/ID), lower-cased."""
    out = {}
    for case in cases(root):
        path = case / "metadata.json"
        try:
            result = json.loads(path.read_text())["result"]
            out[snapshot(case)] = tuple(str(result[f]).strip().lower() for f in FIELDS)
        except (OSError, json.JSONDecodeError, KeyError, TypeError) as e:
            raise RcalabError(f"{path}: no label (result with {', '.join(FIELDS)}): {e}") from None
    if not out:
        raise RcalabError(f"{root}: no Cloud-OpsBench case folders (raw_data/k8s_states.json) under it")
    return out


def evaluate(truth: Path, answers: Path) -> dict:
    """The summary, and each case's label and hits (`cases`: uuid -> label, A@1 ... cause@1; unanswered: none)."""
    problems: list[str] = []
    label = labels(truth)
    rows = read_jsonl(answers, {"uuid": str, "top_3_predictions": list}, problems)
    cases, misses = {}, []
    for uuid, want in label.items():
        hit = {"label": want} | {m: False for m in MEASURES[:4]}
        cases[uuid] = hit
        if uuid not in rows:
            continue
        predicted = [tuple(str(p.get(f, "")).strip().lower() for f in FIELDS)
                     for p in rows[uuid][1]["top_3_predictions"][:3] if isinstance(p, dict)]
        first = predicted[0] if predicted else ("", "", "")
        hit |= {"A@1": first == want, "A@3": want in predicted, "object@1": first[1] == want[1],
                "cause@1": first[2] == want[2]}
        if first != want:
            misses.append({"uuid": uuid, "label": "/".join(want), "first": "/".join(first)})
    problems += [f"{answers}: an answer for {u}, which is not a case of {truth}" for u in rows if u not in label]
    n = len(label)
    summary = {m: round(sum(c[m] for c in cases.values()) / n, 4) for m in MEASURES[:4]} | {
        "cases": n, "answered": sum(u in rows for u in label)}
    return {"summary": summary, "cases": cases, "misses": misses, "problems": problems, "transcripts": {}}
