"""Cloud-OpsBench's scoring: a prediction is right when its fault taxonomy, object and root cause all equal the
case's label (lower-cased); A@1 from the first of an answer's `top_3_predictions`, A@3 from any of three. The partial
matches count the object alone and the root cause alone at the first prediction. The labels are the case folders'
`metadata.json` (`result`), read here and nowhere else."""

from __future__ import annotations

import json
from pathlib import Path

from etl.adapters.cloudopsbench import cases, snapshot
from rcalab.errors import RcalabError

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
    problems: list[str] = []
    label = labels(truth)
    rows = read_jsonl(answers, {"uuid": str, "top_3_predictions": list}, problems)
    hits = {m: 0 for m in MEASURES[:4]}
    answered, misses = 0, []
    for uuid, want in label.items():
        if uuid not in rows:
            continue
        answered += 1
        predicted = [tuple(str(p.get(f, "")).strip().lower() for f in FIELDS)
                     for p in rows[uuid][1]["top_3_predictions"][:3] if isinstance(p, dict)]
        first = predicted[0] if predicted else ("", "", "")
        hits["A@1"] += first == want
        hits["A@3"] += want in predicted
        hits["object@1"] += first[1] == want[1]
        hits["cause@1"] += first[2] == want[2]
        if first != want:
            misses.append({"uuid": uuid, "label": "/".join(want), "first": "/".join(first)})
    problems += [f"{answers}: an answer for {u}, which is not a case of {truth}" for u in rows if u not in label]
    n = len(label)
    summary = {m: round(h / n, 4) for m, h in hits.items()} | {"cases": n, "answered": answered}
    return {"summary": summary, "misses": misses, "problems": problems, "transcripts": {}}
