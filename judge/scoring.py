"""The challenge's rules (challenge2025/SCORING.md), each in one place.

Final = 100 x (0.40 LA + 0.40 TA + 0.10 Efficiency + 0.10 Explainability)
- LA: exact, case-sensitive component match with `instance` (any element of a list).
- TA: the reason's first 20 words contain a `key_metrics` keyword (case-insensitive);
  the `semantic` rule set re-judges a miss by sentence similarity with `fault_description`.
- Efficiency: min(1, exp(-(APL - 5) / 5)), APL = mean steps over cases with a correct component.
- Explainability: evidence points hit / all points; the first 20 words of each observation count.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from common.errors import RcalabError, read_text

WORDS = 20
WEIGHTS = {"LA": 0.40, "TA": 0.40, "efficiency": 0.10, "explainability": 0.10}
TRACE_ACTION = re.compile(r"trace|span|call", re.I)
LOG_ACTION = re.compile(r"log", re.I)


@dataclass(frozen=True)
class Rules:
    name: str
    semantic: bool = False
    threshold: float = 0.6


RULE_SETS = {"official": Rules("official"), "semantic": Rules("semantic", semantic=True)}


def first_words(text: str, n: int = WORDS) -> str:
    return " ".join(str(text).split()[:n])


def component_correct(component: str, instance) -> bool:
    names = instance if isinstance(instance, list) else [instance]
    return component in names


def reason_keyword_hit(reason: str, key_metrics: list[str]) -> bool:
    text = first_words(reason).lower()
    return any(k and k.lower() in text for k in key_metrics)


def _whole_word(keyword: str, text: str) -> bool:
    return re.search(rf"(?<![\w]){re.escape(keyword.lower())}(?![\w])", text) is not None


def point_hit(point: dict, trace: list[dict]) -> bool:
    """One key observation: metric by whole-word name; log by a log step; trace by a trace step naming a component."""
    keywords = [k for k in point.get("keyword", []) if k]
    kind = point.get("type")
    for step in trace:
        observation = first_words(step.get("observation", "")).lower()
        action = str(step.get("action", ""))
        if kind == "metric" and any(_whole_word(k, observation) for k in keywords):
            return True
        if kind == "log" and LOG_ACTION.search(action) and any(k.lower() in observation for k in keywords):
            return True
        if kind == "trace" and TRACE_ACTION.search(action) and any(_whole_word(k, observation) for k in keywords):
            return True
    return False


@dataclass
class CaseScore:
    uuid: str
    fault_type: str
    level: str
    answered: bool
    component: str | None
    component_ok: bool
    reason_ok: bool
    similarity: float | None
    steps: int
    points: int
    points_hit: int
    missed_points: list[dict] = field(default_factory=list)
    predicted_level: str | None = None


@dataclass
class Score:
    rules: str
    cases: list[CaseScore]
    problems: list[str]  # malformed, duplicate, unknown lines, with line numbers

    def summary(self) -> dict:
        n = len(self.cases) or 1
        la = sum(c.component_ok for c in self.cases) / n
        ta = sum(c.reason_ok for c in self.cases) / n
        correct = [c for c in self.cases if c.component_ok]
        apl = sum(c.steps for c in correct) / len(correct) if correct else None
        eff = min(1.0, math.exp(-(apl - 5) / 5)) if apl is not None else 0.0
        points = sum(c.points for c in self.cases)
        expl = sum(c.points_hit for c in self.cases) / points if points else 0.0
        parts = {"LA": la, "TA": ta, "efficiency": eff, "explainability": expl}
        final = 100 * sum(WEIGHTS[k] * v for k, v in parts.items())
        return {"rules": self.rules, "final": round(final, 2), **{k: round(v, 4) for k, v in parts.items()},
                "APL": round(apl, 2) if apl is not None else None, "cases": len(self.cases),
                "answered": sum(c.answered for c in self.cases), "problems": len(self.problems)}


TRUTH_FIELDS = {"uuid": str, "instance": (str, list), "key_metrics": list}
ANSWER_FIELDS = {"uuid": str, "component": str, "reason": str, "reasoning_trace": list}


def read_jsonl(path: Path, required: dict[str, type | tuple], problems: list[str]) -> dict[str, tuple[int, dict]]:
    """Rows by uuid (the first of duplicates), noting malformed lines, missing fields and fields of the wrong
    type with line numbers."""
    lines = read_text(path).splitlines()
    rows: dict[str, tuple[int, dict]] = {}
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            problems.append(f"{path}:{lineno}: malformed JSON ({e.msg})")
            continue
        except RecursionError:
            problems.append(f"{path}:{lineno}: JSON nested too deeply")
            continue
        if not isinstance(row, dict):
            problems.append(f"{path}:{lineno}: not a JSON object")
            continue
        missing = [k for k in required if k not in row]
        if missing:
            problems.append(f"{path}:{lineno}: missing field {', '.join(missing)}")
            continue
        wrong = [k for k, kind in required.items() if not isinstance(row[k], kind)]
        if wrong:
            problems.append(f"{path}:{lineno}: field {', '.join(wrong)} of the wrong type")
            continue
        if row["uuid"] in rows:
            problems.append(f"{path}:{lineno}: duplicate uuid {row['uuid']} (line {rows[row['uuid']][0]} counts)")
            continue
        rows[row["uuid"]] = (lineno, row)
    return rows


def predicted_level(component: str | None) -> str | None:
    """The level an answer names: a node, a pod (name ends in a replica number) or a service."""
    if component is None:
        return None
    if re.match(r"^(aiops-k8s-|k8s-master)", component):
        return "node"
    if re.search(r"-\d+$", component):
        return "pod"
    return "service"


def score(truth_path: Path, answers_path: Path, rules: str = "official",
          similarity: Callable[[str, list[str]], float] | None = None) -> Score:
    """Score an answer file against the ground truth under a named rule set."""
    if rules not in RULE_SETS:
        raise RcalabError(f"unknown rule set '{rules}' (known: {', '.join(RULE_SETS)})")
    rule = RULE_SETS[rules]
    problems: list[str] = []
    truth = read_jsonl(truth_path, TRUTH_FIELDS, problems)
    answers = read_jsonl(answers_path, ANSWER_FIELDS, problems)
    for uuid, (lineno, _) in answers.items():
        if uuid not in truth:
            problems.append(f"{answers_path}:{lineno}: unknown uuid {uuid}")
    if rule.semantic and similarity is None:
        from .similarity import best_similarity as similarity
    cases = []
    for uuid, (_, t) in truth.items():
        a = answers.get(uuid, (0, None))[1]
        points = t.get("key_observations", [])
        if a is None:
            cases.append(CaseScore(uuid, t.get("fault_type", ""), t.get("instance_type", ""), False, None, False,
                                   False, None, 0, len(points), 0, list(points)))
            problems.append(f"{answers_path}: no answer for {uuid}")
            continue
        trace = [s for s in a["reasoning_trace"] if isinstance(s, dict)] if isinstance(a["reasoning_trace"], list) else []
        hit = reason_keyword_hit(a["reason"], t["key_metrics"])
        sim = similarity(first_words(a["reason"]), t.get("fault_description", [])) if similarity else None
        if rule.semantic and not hit and sim is not None:
            hit = sim >= rule.threshold
        missed = [p for p in points if not point_hit(p, trace)]
        cases.append(CaseScore(uuid, t.get("fault_type", ""), t.get("instance_type", ""), True, a["component"],
                               component_correct(a["component"], t["instance"]), hit, sim, len(trace), len(points),
                               len(points) - len(missed), missed, predicted_level(a["component"])))
    return Score(rules, cases, problems)
