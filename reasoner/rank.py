"""The `rank` agent: the ranking's top option as the answer, with no model. It is also what the
`llm` agent answers when the model fails, so that every case gets the evidence-backed answer."""

from __future__ import annotations

from collections.abc import Sequence

from features.digest import Digest

REASON_WORDS = 20
OBSERVATION_WORDS = 20
ACTIONS = {"metric": "MetricAnalysis", "changepoint": "MetricAnalysis", "silence": "MetricAnalysis",
           "log": "LogSearch", "trace": "TraceAnalysis", "event": "TraceAnalysis"}


def words(text: str, n: int) -> str:
    return " ".join(text.split()[:n])


NAMED = ("metric", "changepoint", "silence", "log", "event")  # evidence keyed by a metric name or log keywords


def reason(fault_type: str, key: str, evidence: list, checked: Sequence[str] = ()) -> str:
    """The fault type, the option's key metric or keyword first, then the other keys of the candidate's own
    evidence, metric names and log keywords before the names of trace analyses, then what a check of the
    candidate found besides (`checked`)."""
    ranked = sorted((e for e in evidence if not e.echo), key=lambda e: e.kind not in NAMED)
    others = [k for k in dict.fromkeys([*(e.key for e in ranked), *checked]) if k != key]
    return words(f"{fault_type}: {key}" + (f" (with {', '.join(others)})" if others else ""), REASON_WORDS)


def evidence_steps(digest: Digest, component: str) -> list[dict]:
    """One step per kind of analysis the ranking ran (metrics, logs, traces): the strongest evidence of that
    kind, the chosen component's first and then the other candidates' (callers' logs, the call path)."""
    chosen = next((c for c in digest.candidates if c.component == component), None)
    pool = (chosen.evidence if chosen else []) + [e for c in digest.candidates if c is not chosen for e in c.evidence]
    steps = []
    for action in dict.fromkeys(ACTIONS.values()):
        item = next((e for e in pool if ACTIONS.get(e.kind) == action), None)
        if item:
            steps.append({"action": f"{action}({item.component})", "observation": words(item.text, OBSERVATION_WORDS)})
    return steps


def answer(digest: Digest) -> dict | None:
    """The challenge answer for the top candidate and its first option, or None without candidates."""
    if not digest.candidates:
        return None
    top = digest.candidates[0]
    options = digest.options.get(top.component) or []
    fault_type, key = (options[0].fault_type, options[0].key) if options else ("unknown", top.evidence[0].key)
    steps = evidence_steps(digest, top.component)
    return {"uuid": digest.uuid, "component": top.component, "reason": reason(fault_type, key, top.evidence),
            "reasoning_trace": [{"step": i, **s} for i, s in enumerate(steps, 1)]}
