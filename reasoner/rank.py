"""The `rank` agent: the ranking's top option as the answer, with no model. It is also what the
`llm` agent answers when the model fails, so that every case gets the evidence-backed answer."""

from __future__ import annotations

import re
from collections.abc import Sequence

from features.digest import Digest
from features.evidence.logs import ERROR_WORDS

REASON_WORDS = 40
OBSERVATION_WORDS = 20
ACTIONS = {"metric": "MetricAnalysis", "changepoint": "MetricAnalysis", "silence": "MetricAnalysis",
           "log": "LogSearch", "trace": "TraceAnalysis", "event": "TraceAnalysis"}
CORROBORATION = 4  # the other keys of its own evidence a reason names besides its key
CHECKED = 2  # and the keys a check of the llm agent found moving besides
SET_ASIDE = 2  # candidates after the chosen one that the trace says why it set aside
NAMED = ("metric", "changepoint", "silence", "log", "event")  # evidence keyed by a metric name or log keywords
# How a value moved, as the evidence lines write it: "0.09 -> 1.9", "26 -> 1.1k ms", "in 100% of spans, now 0%".
ARROW = re.compile(r"(-?[\d.]+[kMG%]?) -> (-?[\d.]+[kMG%]?)( ms)?")
SHARE = re.compile(r"in (\d+%) of spans, now (\d+%)")
SCALE = {"k": 1e3, "M": 1e6, "G": 1e9, "%": 1.0}


def words(text: str, n: int) -> str:
    return " ".join(text.split()[:n])


def _number(text: str) -> float:
    return float(text[:-1]) * SCALE[text[-1]] if text[-1] in SCALE else float(text)


def moved(item) -> str:
    """How the item's value moved, in words ("rose from 0.09 to 1.9"), or "" where its line says no numbers."""
    found = ARROW.search(item.text) or SHARE.search(item.text)
    if not found:
        return ""
    before, after = found.group(1), found.group(2)
    unit = found.group(3) or "" if found.re is ARROW else " of spans"
    try:
        verb = "rose" if _number(after) > _number(before) else "fell"
    except ValueError:
        return ""
    return f" {verb} from {before} to {after}{unit}"


def said(item) -> str:
    """An item in a few words: its key and how it moved."""
    return f"{item.key}{moved(item)}"


def _own(evidence: list) -> list:
    return sorted((e for e in evidence if not e.echo), key=lambda e: e.kind not in NAMED)


def reason(component: str, fault_type: str, key: str, evidence: list, checked: Sequence[str] = ()) -> str:
    """One sentence: the fault type in the component, the key metric or keyword and how it moved (in how many
    pods), then the other keys of its own evidence and what a check of it found besides (`checked`)."""
    own = _own(evidence)
    first = next((e for e in own if e.key == key), None)
    pods = len({e.component for e in own if e.key == key})
    head = f"{fault_type[:1].upper()}{fault_type[1:]} in {component}: {key}" + (moved(first) if first else "")
    head += f" in {pods} pods" if pods > 1 else ""
    others = [k for k in dict.fromkeys(e.key for e in own) if k != key][:CORROBORATION]
    others += [k for k in dict.fromkeys(checked) if k != key and k not in others][:CHECKED]
    while others and len(f"{head}; also {', '.join(others)}.".split()) > REASON_WORDS:
        others.pop()
    return f"{head}; also {', '.join(others)}." if others else f"{head}."


def brief(item) -> str:
    """An item as few words as a trace step can hold: a metric and its move ("rrt 4k->9k"), a log line's
    component and words, a trace line as it is."""
    if item.kind in ("metric", "changepoint", "silence"):
        found = ARROW.search(item.text)
        return f"{item.key} {found.group(1)}->{found.group(2)}" if found else item.key
    if item.kind == "log":
        return f"{item.component} logs {', '.join(failing(item)) or item.key}"
    return item.text


def failing(item) -> list[str]:
    """The words of a log item's line that say what failed (error, Unavailable, refused), once each."""
    line = item.text.split(": ", 1)[-1]
    return list(dict.fromkeys(w.strip("\"'.,:;()[]=").lower() for w in line.split() if ERROR_WORDS.search(w)))


def evidence_steps(digest: Digest, component: str) -> list[dict]:
    """How the answer was reached: the chosen component's evidence, one step per kind of analysis (metrics, logs,
    traces), each naming what moved (its own items, and the lines of others that name it: a caller's log of its
    failing calls, a call into it); then one step per next candidate, why it was set aside."""
    chosen = next((c for c in digest.candidates if c.component == component), None)
    if chosen is None:
        return []
    about = [e for c in digest.candidates if c is not chosen for e in c.found or c.evidence
             if e.kind in ("log", "trace") and (c.explained_by == component or component in e.text)]
    steps = []
    for action in dict.fromkeys(ACTIONS.values()):
        items = [e for e in [*(chosen.found or chosen.evidence), *about]
                 if ACTIONS.get(e.kind) == action and (not e.echo or e in about)]
        pods: dict[str, set[str]] = {}  # a metric once, with the pods it moved in
        for e in items:
            pods.setdefault(brief(e).split()[0] if action == "MetricAnalysis" else brief(e), set()).add(e.component)
        said = [next(brief(e) for e in items if brief(e).split()[0] == k) + (f" ({len(p)} pods)" if len(p) > 1 else "")
                if action == "MetricAnalysis" else k for k, p in pods.items()]
        if action == "LogSearch":  # each failing word once, with the first component that logs it
            heard: set[str] = set()
            said = []
            for e in items:
                new = [w for w in failing(e) if w not in heard]
                heard.update(new)
                if new or not failing(e):
                    said.append(f"{e.component} logs {', '.join(new) or e.key}")
        if said:
            steps.append({"action": f"{action}({component})", "observation": words("; ".join(said), OBSERVATION_WORDS)})
    for c in [c for c in digest.candidates if c is not chosen][:SET_ASIDE]:
        if not c.evidence:
            continue
        why = (f"an echo of its dependency {c.explained_by}" if c.explained_by
               else f"weaker, {c.score:.2f} against {chosen.score:.2f}")
        strongest = c.evidence[0]
        steps.append({"action": f"{ACTIONS.get(strongest.kind, 'MetricAnalysis')}({c.component})",
                      "observation": words(f"set aside {c.component} ({why}): {brief(strongest)}", OBSERVATION_WORDS)})
    return steps


def trace_of(steps: list[dict]) -> list[dict]:
    """The reasoning trace: the steps numbered; a step whose action was taken already (a check of evidence the
    ranking read) adds what it found to that step, so that a check makes the trace no longer; nothing twice."""
    said: dict[str, str] = {}
    for s in steps:
        before = said.get(s["action"])
        if before is None:
            said[s["action"]] = s["observation"]
        elif s["observation"] not in before:
            said[s["action"]] = f"{before.rstrip('; ')}; checked: {s['observation']}"  # words() may end on a ';'
    return [{"step": i, "action": a, "observation": o} for i, (a, o) in enumerate(said.items(), 1)]


def answer(digest: Digest) -> dict | None:
    """The challenge answer for the top candidate and its first option, or None without candidates."""
    if not digest.candidates:
        return None
    top = digest.candidates[0]
    options = digest.options.get(top.component) or []
    fault_type, key = (options[0].fault_type, options[0].key) if options else ("unknown", top.evidence[0].key)
    return {"uuid": digest.uuid, "component": top.component,
            "reason": reason(top.component, fault_type, key, top.found or top.evidence),
            "reasoning_trace": trace_of(evidence_steps(digest, top.component))}
