"""Cases of a dump that carries its own fault labels (Nezha's fault lists, RCAEval's case folders): `input.json` and
`groundtruth.jsonl` in the challenge's schemas, so that diagnose and the judge run on real data."""

from __future__ import annotations

import json
from pathlib import Path

from common.errors import DumpError

from .adapters import adapter_for


def labelled_cases(dump: Path) -> list[dict]:
    """Ground-truth rows from the labels a dump carries (Nezha's fault lists, RCAEval's case folders), by time."""
    adapter = adapter_for(dump)
    labels = getattr(adapter, "labels", None)
    if labels is None:
        raise DumpError(f"{dump}: a {adapter.NAME} dump carries no fault labels")
    rows = labels(Path(dump))
    if not rows:
        raise DumpError(f"{dump}: no fault labels found")
    return rows


def write_cases(dump: Path, out: Path) -> int:
    rows = labelled_cases(dump)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "groundtruth.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    questions = [{"Anomaly Description": f"The system experienced an anomaly from {r['start_time']} to "
                                         f"{r['end_time']}. Please infer the possible cause.", "uuid": r["uuid"]}
                 for r in rows]
    (out / "input.json").write_text(json.dumps(questions, indent=2) + "\n")
    return len(rows)
