"""What a person reads after scoring: breakdowns, the misses, transcript figures; JSON and one HTML page."""

from __future__ import annotations

import base64
import html
import io
import json
from collections import defaultdict
from pathlib import Path

from common.errors import read_text
from features.graph import service_of
from reasoner.batch import transcripts_path

from .scoring import TRUTH_FIELDS, Score, read_jsonl, score

# Published for Nezha (FSE 2023) on the systems of its dumps, by Nezha's namespace.
NEZHA_PAPER = {"ts": {"system": "Train Ticket", "AS@1": 0.8667, "AS@3": 0.9778},
               "hipster": {"system": "Online Boutique", "AS@1": 0.9286, "AS@3": 0.9643}}


def breakdown(score: Score) -> dict:
    by_type: dict[str, list] = defaultdict(list)
    by_level: dict[str, list] = defaultdict(list)
    levels: dict[str, int] = defaultdict(int)
    for c in score.cases:
        by_type[c.fault_type].append(c)
        by_level[c.level].append(c)
        levels[f"{c.level} -> {c.predicted_level or 'none'}"] += 1

    def acc(cases):
        return {"cases": len(cases), "LA": round(sum(c.component_ok for c in cases) / len(cases), 3),
                "TA": round(sum(c.reason_ok for c in cases) / len(cases), 3)}
    return {"by_fault_type": {k: acc(v) for k, v in sorted(by_type.items())},
            "by_level": {k: acc(v) for k, v in sorted(by_level.items())},
            "true_vs_predicted_level": dict(sorted(levels.items()))}


def misses(score: Score) -> list[dict]:
    out = []
    for c in score.cases:
        if c.component_ok and c.reason_ok and not c.missed_points:
            continue
        out.append({"uuid": c.uuid, "fault_type": c.fault_type, "answered": c.answered, "component": c.component,
                    "component_ok": c.component_ok, "reason_ok": c.reason_ok, "similarity": c.similarity,
                    "missed_points": [f"{p.get('type')}: {', '.join(p.get('keyword', []))}" for p in c.missed_points]})
    return out


def _numbers(row: dict) -> bool:
    """The figures a transcript line adds up are numbers where it has them."""
    tokens = row.get("tokens", {})
    return (isinstance(row.get("seconds", 0), (int, float)) and isinstance(row.get("tool_calls", 0), int)
            and isinstance(row.get("calls", []), list) and isinstance(row.get("candidates") or [], list)
            and isinstance(tokens, dict) and all(isinstance(v, int) for v in tokens.values()))


def transcript_figures(answers: Path, truth_services: dict[str, list[str]]) -> dict | None:
    """Time, steps and tokens per case (the AIOpsLab figures), and AC@1/AC@3 of the ranked candidates."""
    path = transcripts_path(answers)
    if not path.exists():
        return None
    rows = []
    for line in read_text(path).splitlines():  # a transcript line of the wrong shape is left out
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            continue
        if isinstance(row, dict) and isinstance(row.get("uuid"), str) and _numbers(row):
            rows.append(row)
    if not rows:
        return None
    n = len(rows)
    figures = {
        "transcripts": n,
        "seconds_per_case": round(sum(r.get("seconds", 0) for r in rows) / n, 2),
        "llm_calls_per_case": round(sum(len(r.get("calls", [])) for r in rows) / n, 2),
        "tool_calls_per_case": round(sum(r.get("tool_calls", 0) for r in rows) / n, 2),
        "prompt_tokens_per_case": round(sum(r.get("tokens", {}).get("prompt_tokens", 0) for r in rows) / n),
        "output_tokens_per_case": round(sum(r.get("tokens", {}).get("completion_tokens", 0) for r in rows) / n),
        "failed": sum(r.get("status") == "failed" for r in rows),
        "fallback": sum(r.get("status") == "fallback" for r in rows),
        "no_clear_root_cause": sum(r.get("clear") is False for r in rows),
    }
    ranked = [(r["uuid"], r.get("candidates") or []) for r in rows if r.get("uuid") in truth_services]
    if ranked:
        for k in (1, 3):
            hits = sum(any(s in truth_services[uuid] for s in ranked_services(cands)[:k]) for uuid, cands in ranked)
            figures[f"AC@{k}"] = round(hits / len(ranked), 4)
    return figures


def ranked_services(components: list[str]) -> list[str]:
    """The services of ranked components, first appearance kept (service-level AC@k)."""
    return list(dict.fromkeys(service_of(c) for c in components))


def _chart(by_type: dict) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(by_type)
    rows = range(len(names))
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(names) + 1))
    ax.barh([r - 0.2 for r in rows], [by_type[n]["LA"] for n in names], height=0.4, color="tab:blue", label="LA")
    ax.barh([r + 0.2 for r in rows], [by_type[n]["TA"] for n in names], height=0.4, color="tab:orange", label="TA")
    ax.set_yticks(list(rows), [n.replace("$", r"\$") for n in names])  # a '$' in a name is no mathtext
    ax.set_xlim(0, 1)
    ax.invert_yaxis()
    ax.legend(loc="lower right")
    ax.set_title("accuracy per fault type")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def notebook_links(notebooks: dict[str, str]) -> str:
    """A paragraph linking the rendered notebooks (name -> page within the folder, or why it was not rendered)."""
    if not notebooks:
        return ""
    said = [f"<a href='{html.escape(what)}'>{html.escape(name)}</a>" if what.endswith(".html")
            else f"{html.escape(name)} ({html.escape(what)})" for name, what in notebooks.items()]
    return f"<p>The notebooks, executed on this store: {', '.join(said)}.</p>"


def write_report(folder: Path, results: dict[str, dict], pages: dict[str, dict[str, str]] | None = None,
                 notebooks: dict[str, str] | None = None) -> Path:
    """`report.json` and a self-contained `report.html` (no server, no external files); where `pages` gives a case
    page (per answers file, uuid -> its path within `folder`), the case links to it; `notebooks` are linked too."""
    pages = pages or {}
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "report.json").write_text(json.dumps(results, indent=2) + "\n")
    parts = ["<!doctype html><meta charset='utf-8'><title>rcalab judge</title>",
             "<style>body{font:14px sans-serif;margin:2em}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}td:first-child{text-align:left}</style>"]
    first = next(iter(results.values()))
    parts.append(f"<h1>rcalab judge</h1><p>Rule set: <b>{html.escape(first['summary']['rules'])}</b></p>")
    parts.append(notebook_links(notebooks or {}))
    keys = ["final", "LA", "TA", "efficiency", "explainability", "APL", "cases", "answered"]
    parts.append("<table><tr><th>answers</th>" + "".join(f"<th>{k}</th>" for k in keys) + "</tr>")
    for name, r in results.items():
        parts.append(f"<tr><td>{html.escape(name)}</td>" + "".join(f"<td>{r['summary'][k]}</td>" for k in keys)
                     + "</tr>")
    parts.append("</table>")
    for name, r in results.items():
        parts.append(f"<h2>{html.escape(name)}</h2>")
        if r.get("transcripts"):
            parts.append("<table>" + "".join(f"<tr><td>{html.escape(k.replace('_', ' '))}</td>"
                                             f"<td>{html.escape(str(v))}</td></tr>"
                                             for k, v in r["transcripts"].items()) + "</table>")
        parts.append(f"<img alt='accuracy per fault type' src='data:image/png;base64,"
                     f"{_chart(r['breakdown']['by_fault_type'])}'>")
        if r.get("grounding"):
            g = r["grounding"]
            parts.append(f"<p>Grounded: {g['grounded']} of the {g['walked']} traces that walk the fault's path "
                         f"({g['answered']} answers): every hop a link of the dependency graph, every component on it "
                         "out of its baseline, the onsets from the cause outward.</p>")
            parts.append(f"<p>Held: {g.get('held')} of the answers state nothing the store does not hold (every "
                         "line they quote logged in the window, every metric name and number in its evidence).</p>")
            problems = {u: p for u, p in g["not_grounded"].items()}
            for u, facts in g.get("unfounded", {}).items():
                problems.setdefault(u, []).append("not in the store: " + ", ".join(facts))
            if problems:
                parts.append("<table><tr><th>case</th><th>what does not hold</th></tr>" + "".join(
                    f"<tr><td>{html.escape(u)}</td><td>{html.escape('; '.join(p))}</td></tr>"
                    for u, p in problems.items()) + "</table>")
        linked = pages.get(name, {})
        parts.append("<h3>Cases that missed something</h3><p>A right component and reason can still miss evidence "
                     "points the ground truth lists (explainability).</p><table><tr><th>case</th><th>fault type</th>"
                     "<th>answer</th><th>component</th><th>reason</th><th>evidence points missed</th></tr>")
        for m in r["misses"]:
            case = html.escape(m["uuid"])
            if m["uuid"] in linked:
                case = f"<a href='{html.escape(linked[m['uuid']])}'>{case}</a>"
            parts.append(f"<tr><td>{case}</td>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in (
                m["fault_type"], m["component"], "right" if m["component_ok"] else "wrong",
                "right" if m["reason_ok"] else "wrong", "; ".join(m["missed_points"]))) + "</tr>")
        parts.append("</table>")
        if linked:
            index = next(iter(linked.values())).rsplit("/", 1)[0] + "/index.html"
            parts.append(f"<p><a href='{html.escape(index)}'>Every case, with its page</a></p>")
        if r["problems"]:
            parts.append("<h3>Input problems</h3><ul>" + "".join(f"<li>{html.escape(p)}</li>" for p in r["problems"])
                         + "</ul>")
    path = folder / "report.html"
    path.write_text("\n".join(parts))
    return path


def evaluate(truth: Path, answers: Path, rules: str = "official") -> dict:
    """Score, breakdowns, misses, input problems and transcript figures of one answer file."""
    s = score(truth, answers, rules)
    rows = [row for _, row in read_jsonl(truth, TRUTH_FIELDS, []).values()]
    services = {r["uuid"]: [service_of(i) for i in (r["instance"] if isinstance(r["instance"], list)
                                                     else [r["instance"]])] for r in rows}
    figures = transcript_figures(answers, services)
    systems = {r.get("system") if r.get("fault_category") == "nezha" else None for r in rows}
    if figures and "AC@1" in figures and len(systems) == 1 and (system := systems.pop()) in NEZHA_PAPER:
        figures["nezha_paper"] = NEZHA_PAPER[system]
    return {"summary": s.summary(), "breakdown": breakdown(s), "misses": misses(s), "problems": s.problems,
            "transcripts": figures}
