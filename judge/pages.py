"""A page per case, for a person to check an answer: the question, the answer, the ranked candidates with their
evidence, the key metric around the window with its change points, the dependency graph around the answer, the
log lines and slow calls behind it, and the transcript. Self-contained HTML (pictures inline, no network); every
name and text from the telemetry or a model is escaped."""

from __future__ import annotations

import base64
import datetime as dt
import html
import io
import json
from pathlib import Path

from etl import store
from features.cases import Question
from features.digest import Digest, build_digest
from features.evidence import Window
from features.graph import CALLS, dependency_graph
from rcalab.errors import OutputError, read_text
from reasoner.batch import transcripts_path

AROUND = dt.timedelta(minutes=60)
MAX_LINES = 15
STYLE = ("body{font:14px sans-serif;margin:2em;max-width:1100px}table{border-collapse:collapse}"
         "td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top}"
         "pre{white-space:pre-wrap;background:#f6f6f6;padding:6px}.answer{font-size:16px}")
# Marks the page once its pictures have loaded, and how long it took (a browser test reads them).
ON_LOAD = ("<script>window.addEventListener('load',()=>{document.body.dataset.images="
           "[...document.images].filter(i=>i.complete&&i.naturalWidth>0).length;"
           "document.body.dataset.ms=Math.round(performance.now());});</script>")


def png(fig) -> str:
    """A matplotlib figure as an inline image source; the figure is closed."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=80)
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _text(value) -> str:
    """Telemetry text for a picture: '$' is no mathtext there."""
    return str(value).replace("$", r"\$")


def key_metric_plot(con, digest: Digest, component: str, w: Window) -> str | None:
    """The answer's key metric (or its strongest metric) on its pods, an hour either side, with change points."""
    chosen = next((c for c in digest.candidates if c.component == component), None)
    keys = [o.key for o in digest.options.get(component, [])]
    keys += [e.key for e in (chosen.found if chosen else []) if e.kind in ("metric", "changepoint")]
    for key in dict.fromkeys(keys):
        series = con.execute("""
            select component, ts, avg(value) from metric_points
            where metric = ? and (component = ? or service = ?) and ts between ? and ?
            group by all order by component, ts""",
                             [key, component, component, w.start - AROUND, w.end + AROUND]).fetchall()
        if series:
            break
    else:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(10, 3.2))
    for name in sorted({s[0] for s in series})[:4]:
        points = [(t, v) for c, t, v in series if c == name]
        ax.plot([t for t, _ in points], [v for _, v in points], label=_text(name))
    ax.axvspan(w.start, w.end, color="tab:red", alpha=0.1, label="the window")
    for (ts,) in con.execute("""select distinct ts from changepoints where metric = ? and (component = ? or service = ?)
                               and ts between ? and ?""", [key, component, component, w.start - AROUND,
                                                           w.end + AROUND]).fetchall():
        ax.axvline(ts, color="black", linestyle="--", linewidth=1)
    ax.set_title(_text(f"{key} of {component} (dashed: change points)"))
    ax.legend(fontsize=8)
    return png(fig)


def graph_plot(con, digest: Digest, component: str, w: Window) -> str | None:
    """The services around the answer on the call graph, the candidates coloured by score, the answer ringed."""
    import networkx as nx

    g = dependency_graph(con, w)
    calls = nx.DiGraph([(a, b) for a, b, k in g.edges(data="kind") if k in CALLS])
    service_of = {p: s for s, p, k in g.edges(data="kind") if k == "has"}
    score = {}
    for c in digest.candidates:
        score.setdefault(service_of.get(c.component, c.component), c.score)
    root = service_of.get(component, component)
    if root not in calls:
        calls.add_node(root)
    near = {root} | set(calls.predecessors(root)) | set(calls.successors(root)) | (set(score) & set(calls))
    sub = calls.subgraph(near)
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(10, 6))
    pos = nx.spring_layout(sub, seed=1)
    top = max(score.values(), default=1.0) or 1.0
    nx.draw_networkx_edges(sub, pos, ax=ax, alpha=0.4, arrows=True)
    nx.draw_networkx_nodes(sub, pos, ax=ax, node_color=[score.get(n, 0.0) / top for n in sub],
                           cmap="Reds", vmin=0, vmax=1, edgecolors="grey")
    nx.draw_networkx_nodes(sub, pos, nodelist=[root], ax=ax, node_size=900, node_color="none",
                           edgecolors="red", linewidths=3)
    nx.draw_networkx_labels(sub, pos, {n: _text(n) for n in sub}, ax=ax, font_size=8)
    ax.set_title(_text(f"calls around {root} (darker: higher score; ringed: the answer)"))
    ax.axis("off")
    return png(fig)


def _table(head: list[str], rows: list[list]) -> str:
    out = "<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>"
    for row in rows:
        out += "<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>"
    return out + "</table>"


def case_page(con, q: Question, answer: dict | None, transcript: dict | None) -> str:
    w = Window.around(q.start, q.end)
    digest = build_digest(con, q)
    component = (answer or {}).get("component") or (digest.candidates[0].component if digest.candidates else "")
    e = html.escape
    parts = [f"<!doctype html><meta charset='utf-8'><title>{e(q.uuid)}</title><style>{STYLE}</style>{ON_LOAD}",
             f"<h1>Case {e(q.uuid)}</h1><p>{e(q.description)}</p>"]
    if answer:
        scores = [c.score for c in digest.candidates]
        margin = f"; score {scores[0]:.2f}, the next {scores[1]:.2f}" if len(scores) > 1 else ""
        status = (transcript or {}).get("status", "")
        if digest.confidence is not None:
            status += f"; confidence {digest.confidence:.2f}" + ("" if digest.clear else ": no clear root cause")
        parts.append(f"<h2>Answer</h2><p class='answer'><b>{e(answer['component'])}</b>: {e(answer['reason'])}</p>"
                     f"<p>{e(status)}{e(margin)}</p>")
        parts.append(_table(["step", "action", "observation"],
                            [[s.get("step"), s.get("action"), s.get("observation")]
                             for s in answer.get("reasoning_trace", [])]))
    else:
        parts.append("<h2>Answer</h2><p>none: no component left its baseline in the window.</p>")
    parts.append("<h2>Candidates</h2>" + _table(
        ["#", "component", "level", "score", "explained by", "options", "evidence"],
        [[i, c.component, c.level, f"{c.score:.2f}", c.explained_by or "",
          "; ".join(f"{o.fault_type}: {o.key}" for o in digest.options.get(c.component, [])),
          " | ".join(x.text for x in c.evidence)] for i, c in enumerate(digest.candidates, 1)]))
    if component:
        for title, picture in (("The key metric around the window", key_metric_plot(con, digest, component, w)),
                               ("The dependency graph around the answer", graph_plot(con, digest, component, w))):
            if picture:
                parts.append(f"<h2>{title}</h2><img alt='{e(title)}' src='{picture}'>")
        lines = con.execute("""select ts::text, component, coalesce(level, ''), left(message, 300) from log_lines
                               where (component = ? or service = ?) and ts between ? and ?
                               order by level in ('ERROR', 'FATAL', 'CRITICAL') desc, ts limit ?""",
                            [component, component, w.start, w.end, MAX_LINES]).fetchall()
        parts.append(f"<h2>Log lines of {e(component)} in the window</h2>" +
                     (_table(["time", "component", "level", "line"], [list(r) for r in lines]) if lines
                      else "<p>none</p>"))
        calls = con.execute("""select caller, callee, sum(calls), sum(errors), round(max(p95_us) / 1000, 1)
                               from trace_edge_minute where (caller = ? or callee = ?) and minute between ? and ?
                               group by all order by 5 desc limit ?""",
                            [component, component, w.start, w.end, MAX_LINES]).fetchall()
        parts.append(f"<h2>Calls into and out of {e(component)} in the window, slowest first</h2>" +
                     (_table(["caller", "callee", "calls", "errors", "p95 ms"], [list(r) for r in calls]) if calls
                      else "<p>none traced</p>"))
    if transcript:
        parts.append("<h2>Transcript</h2>")
        for m in transcript.get("messages", []):
            parts.append(f"<details><summary>{e(str(m.get('role')))}</summary><pre>{e(str(m.get('content')))}"
                         "</pre></details>")
        figures = {k: transcript.get(k) for k in ("status", "error", "why_not_top", "tokens", "seconds")}
        parts.append(f"<p>{e(json.dumps(figures))}</p>")
    return "\n".join(parts)


def _lines(path: Path) -> dict[str, dict]:
    rows = {}
    if Path(path).exists():
        for line in read_text(path).splitlines():
            try:
                row = json.loads(line)
            except (json.JSONDecodeError, RecursionError):
                continue
            if isinstance(row, dict) and isinstance(row.get("uuid"), str):
                rows[row["uuid"]] = row
    return rows


def write_pages(db: Path, questions: list[Question], answers: Path, folder: Path) -> dict[str, Path]:
    """One page per question (`<folder>/<n>.html`, in the questions' order), with its answer and transcript where
    `answers` has them; returns uuid -> page."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"cannot create {folder}: {e.strerror}") from None
    answered, transcripts = _lines(answers), _lines(transcripts_path(answers))
    con = store.connect(db, read_only=True)
    pages = {}
    try:
        for i, q in enumerate(questions, 1):
            path = folder / f"case-{i:04d}.html"  # a uuid is never a file name: it may hold '/' or '..'
            path.write_text(case_page(con, q, answered.get(q.uuid), transcripts.get(q.uuid)))
            pages[q.uuid] = path
    finally:
        con.close()
    rows = [[q.uuid, (answered.get(q.uuid) or {}).get("component", ""), (answered.get(q.uuid) or {}).get("reason", "")]
            for q in questions]
    index = "".join(f"<tr><td><a href='{pages[u].name}'>{html.escape(u)}</a></td><td>{html.escape(c)}</td>"
                    f"<td>{html.escape(r)}</td></tr>" for u, c, r in rows)
    (folder / "index.html").write_text(f"<!doctype html><meta charset='utf-8'><title>rcalab cases</title>"
                                       f"<style>{STYLE}</style><h1>Cases</h1><table><tr><th>case</th>"
                                       f"<th>answer</th><th>reason</th></tr>{index}</table>")
    return pages
