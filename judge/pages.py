"""A page per case, for a person to check an answer: the question, the answer and its steps, the ranked candidates
with their evidence, where users met the fault (the entry's answers per status code), the key metric around the
window with its change points, the dependency graph around the answer, the log lines and slow calls behind it, and
the transcript. Self-contained HTML (pictures inline, no network); every
name and text from the telemetry or a model is escaped."""

from __future__ import annotations

import base64
import datetime as dt
import html
import io
import json
from contextlib import nullcontext
from pathlib import Path

from common.errors import OutputError, read_text
from etl import store
from features.cases import Question
from features.digest import Digest, build_digest
from features.evidence import Window
from features.evidence.kubernetes import findings, status_words
from features.graph import dependency_graph
from features.path import STATUS, calls_by_edge, calls_graph, troubled, walked
from reasoner.batch import transcripts_path

from .report import notebook_links

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


def key_log_plot(con, digest: Digest, component: str, w: Window) -> str | None:
    """Where the answer's key is a log keyword: the lines that hold it per minute, an hour either side."""
    option = next(iter(digest.options.get(component, [])), None)
    if option is None or option.kind != "log":
        return None
    key = option.key
    counts = con.execute("""
        select time_bucket(interval 1 minute, ts) as minute, count(*) from log_lines
        where (component = ? or service = ?) and ts between ? and ? and contains(message, ?) group by all order by 1""",
                         [component, component, w.start - AROUND, w.end + AROUND, key]).fetchall()
    if not counts:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(10, 3.2))
    ax.bar([m for m, _ in counts], [n for _, n in counts], width=1 / 1440, color="tab:purple")
    ax.axvspan(w.start, w.end, color="tab:red", alpha=0.1, label="the window")
    ax.set_title(_text(f"log lines of {component} with '{key}' per minute"))
    ax.legend(fontsize=8)
    return png(fig)


def entry_status_plot(con, entry: str, w: Window) -> str | None:
    """Where users met the fault: the answers the entry's access log gives, per status code and minute, an hour
    either side of the window (nothing where its lines give no status)."""
    counts = con.execute(f"""
        select time_bucket(interval 1 minute, ts) as minute, regexp_extract(message, '{STATUS}', 1) as code, count(*)
        from log_lines where (component = ? or service = ?) and ts between ? and ? and regexp_matches(message, '{STATUS}')
        group by all order by 1""", [entry, entry, w.start - AROUND, w.end + AROUND]).fetchall()
    if not counts:
        return None
    codes = sorted({c for _, c, _ in counts}, key=lambda c: -sum(n for _, x, n in counts if x == c))[:5]
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(10, 2.6))
    for code in codes:
        points = [(m, n) for m, c, n in counts if c == code]
        ax.plot([m for m, _ in points], [n for _, n in points], label=code, marker=".", linewidth=1)
    ax.axvspan(w.start, w.end, color="tab:red", alpha=0.1, label="the window")
    ax.set_title(_text(f"answers of {entry} per status code and minute, as its access log gives them"))
    ax.legend(fontsize=8)
    return png(fig)


def message(line: str) -> str:
    """A log line's message: the message field of a JSON record, else the line."""
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):
        return line
    found = next((record.get(k) for k in ("message", "msg", "log") if isinstance(record, dict) and k in record), None)
    return str(found) if found is not None else line


def svg(fig) -> str:
    """A matplotlib figure as inline SVG, its text as text (searchable, and every element's gid its id); closed."""
    import matplotlib.pyplot as plt

    buf = io.StringIO()
    with plt.rc_context({"svg.fonttype": "none", "svg.hashsalt": "rcalab"}):
        fig.tight_layout()
        fig.savefig(buf, format="svg")
    plt.close(fig)
    return buf.getvalue()[buf.getvalue().index("<svg"):]


def call_graph(con, digest: Digest, path: list[str], w: Window):
    """The call graph in layers, callers above what they call: every call drawn, the calls that failed or slowed
    in the window in red, the fault's path thick with its components ringed, the candidates coloured by score (None
    where the window holds no call, path or candidate). Each call's gid is "call A -> B", a call on the path
    "path A -> B", a component's label "component A"."""
    import networkx as nx

    g = dependency_graph(con, w)
    service_of = {p: s for s, p, k in g.edges(data="kind") if k == "has"}
    calls = calls_graph(g)
    on_path = [service_of.get(c, c) for c in path]
    calls.add_nodes_from(on_path)
    score: dict[str, float] = {}
    for c in digest.candidates:
        score.setdefault(service_of.get(c.component, c.component), c.score)
        calls.add_node(service_of.get(c.component, c.component))
    if not calls:
        return None
    roots = sorted(n for n in calls if calls.in_degree(n) == 0) or sorted(calls)[:1]
    depth = nx.multi_source_dijkstra_path_length(calls, roots) if roots else {}
    for n in calls:  # each below its deepest caller where the calls form no cycle, else at its distance
        calls.nodes[n]["layer"] = depth.get(n, 0)
    if nx.is_directed_acyclic_graph(calls):
        for n in nx.topological_sort(calls):
            calls.nodes[n]["layer"] = max((calls.nodes[p]["layer"] + 1 for p in calls.predecessors(n)), default=0)
    pos = {n: (x, -y) for n, (y, x) in nx.multipartite_layout(calls, subset_key="layer").items()}
    widest = max(sum(1 for n in calls if calls.nodes[n]["layer"] == k) for k in {calls.nodes[n]["layer"] for n in calls})
    figures = calls_by_edge(con, w)
    path_edges = set(zip(on_path, on_path[1:]))
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(8.0, 1.5 * widest), 1.2 * (1 + max(depth.values(), default=0)) + 2))
    top = max(score.values(), default=1.0) or 1.0
    edges = list(calls.edges)
    arrows = nx.draw_networkx_edges(
        calls, pos, ax=ax, edgelist=edges, arrows=True, node_size=600,
        edge_color=["tab:red" if troubled(figures.get(e)) else "tab:blue" if e in path_edges else "#bbb"
                    for e in edges],
        width=[3.5 if e in path_edges else 1.0 for e in edges])
    for (a, b), arrow in zip(edges, arrows):
        arrow.set_gid(f"{'path' if (a, b) in path_edges else 'call'} {a} -> {b}")
    nx.draw_networkx_nodes(calls, pos, ax=ax, node_size=600, node_color=[score.get(n, 0.0) / top for n in calls],
                           cmap="OrRd", vmin=0, vmax=1, edgecolors=["tab:blue" if n in on_path else "#888"
                                                                    for n in calls],
                           linewidths=[3 if n in on_path else 0.5 for n in calls])
    # Labels above their node, every other one of a layer below it, so that long names side by side do not overlap.
    order = {n: i for i, n in enumerate(sorted(calls, key=lambda n: (calls.nodes[n]["layer"], pos[n][0])))}
    for n, label in nx.draw_networkx_labels(calls, pos, {n: _text(n) for n in calls}, ax=ax, font_size=8).items():
        below = order[n] % 2 == 1
        label.set_gid(f"component {n}")
        label.set_verticalalignment("top" if below else "bottom")
        label.set_position((pos[n][0], pos[n][1] + (-0.06 if below else 0.06)))
    ax.margins(x=0.12, y=0.15)  # labels stay inside the picture
    ax.set_title(_text("calls, callers above what they call: red failed or slowed in the window; "
                       "thick, blue: the fault's path; darker: higher score"), fontsize=9)
    ax.axis("off")
    return fig


def _table(head: list[str], rows: list[list]) -> str:
    out = "<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>"
    for row in rows:
        out += "<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>"
    return out + "</table>"


def snapshot_page(con, q: Question, answer: dict | None) -> str:
    """A frozen cluster's case: the answer, every finding with the words it rests on, and the objects of the answer
    with their status, their events and alerts, and their service's log lines that name a failure."""
    e = html.escape
    found = findings(con, q.snapshot)
    parts = [f"<!doctype html><meta charset='utf-8'><title>{e(q.uuid)}</title><style>{STYLE}</style>",
             f"<h1>Case {e(q.uuid)}</h1><p>{e(q.description)}</p>"]
    if answer:
        parts.append(f"<h2>Answer</h2><p class='answer'><b>{e(answer['component'])}</b>: {e(answer['reason'])}</p>")
    else:
        parts.append("<h2>Answer</h2><p>none: every workload, pod, service and node looks as it should.</p>")
    parts.append("<h2>Findings</h2>" + _table(["#", "object", "fault type", "category", "the cluster's words"],
                                              [[i, f.component, f.root_cause, f.taxonomy, " | ".join(f.evidence)]
                                               for i, f in enumerate(found, 1)]))
    if found:
        kind, _, name = found[0].component.partition("/")
        like = name + "%" if kind == "app" else name
        kinds = {"app": ("Deployment", "ReplicaSet", "Pod", "Service", "PersistentVolumeClaim"), "node": ("Node",),
                 "namespace": ("ResourceQuota",)}.get(kind, ())
        objects = con.execute("""select kind, name, status from k8s_objects  -- as the cluster shows them, not
                                 where snapshot = ? and name like ? and list_contains(?, kind)  -- their manifests
                                 and status->>'$.declared' is null
                                 order by kind, name""", [q.snapshot, like, list(kinds)]).fetchall()
        parts.append(f"<h2>The objects of {e(found[0].component)}</h2>" +
                     (_table(["kind", "name", "status", "conditions"],
                             [[kind, name, *status_words(json.loads(status))] for kind, name, status in objects])
                      if objects else "<p>none listed</p>"))
        events = con.execute("""select type, object_kind, object_name, reason, count, message from k8s_events
                                where snapshot = ? and object_name like ? and type <> 'Normal'
                                order by age_s nulls last limit ?""", [q.snapshot, like, MAX_LINES]).fetchall()
        parts.append("<h2>Their events and alerts</h2>" +
                     (_table(["type", "kind", "object", "reason", "count", "message"], [list(r) for r in events])
                      if events else "<p>none</p>"))
        lines = con.execute("""select message from k8s_logs where snapshot = ? and service = ?
                               and regexp_matches(lower(message), 'error|fail|denied|refused|fatal|exception')
                               limit ?""", [q.snapshot, name, MAX_LINES]).fetchall()
        parts.append(f"<h2>Log lines of {e(name)} that name a failure</h2>" +
                     (_table(["line"], [[message(m)[:300]] for m, in lines]) if lines else "<p>none</p>"))
    return "\n".join(parts)


def case_page(con, q: Question, answer: dict | None, transcript: dict | None) -> str:
    if q.snapshot:
        return snapshot_page(con, q, answer)
    w = Window.around(q.start, q.end)
    digest = build_digest(con, q)
    component = (answer or {}).get("component") or (digest.candidates[0].component if digest.candidates else "")
    e = html.escape
    parts = [f"<!doctype html><meta charset='utf-8'><title>{e(q.uuid)}</title><style>{STYLE}</style>{ON_LOAD}",
             f"<h1>Case {e(q.uuid)}</h1><p>{e(q.description)}</p>"]
    if not any(con.execute(f"select 1 from {table} where ts between ? and ? limit 1", [q.start, q.end]).fetchall()
               for table in ("metric_points", "spans", "log_lines")):
        parts.append("<p><b>This window is empty: the store holds no metric, span or log line in it.</b></p>")
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
        path = walked(answer or {}) or [h.component for h in digest.paths.get(component, [])]
        for title, picture in (("Where users met it: the entry's answers", entry_status_plot(con, path[0], w)
                                if path else None),
                               ("The key metric around the window", key_metric_plot(con, digest, component, w)),
                               ("The key log keyword around the window", key_log_plot(con, digest, component, w))):
            if picture:
                parts.append(f"<h2>{title}</h2><img alt='{e(title)}' src='{picture}'>")
        graph = call_graph(con, digest, path, w)
        parts.append(f"<h2>The fault's path on the call graph</h2><p>{e(' -> '.join(path) or 'no path walked')}</p>" +
                     (f"<div class='graph'>{svg(graph)}</div>" if graph else
                      "<p>none: the store holds no calls in this window</p>"))
        lines = con.execute("""select strftime(ts, '%H:%M:%S'), component, coalesce(level, ''), message from log_lines
                               where (component = ? or service = ?) and ts between ? and ?
                               order by level in ('ERROR', 'FATAL', 'CRITICAL') desc, ts limit ?""",
                            [component, component, w.start, w.end, MAX_LINES]).fetchall()
        parts.append(f"<h2>Log lines of {e(component)} in the window</h2>" +
                     (_table(["time", "pod", "level", "message"], [[t, c, lv, message(m)[:300]] for t, c, lv, m in lines])
                      if lines else "<p>none</p>"))
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
        figures = {k: transcript.get(k) for k in ("status", "error", "why_not_top", "unfounded", "tokens", "seconds")}
        parts.append(f"<p>{e(json.dumps(figures))}</p>")
    return "\n".join(parts)


def by_uuid(path: Path) -> dict[str, dict]:
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


def write_pages(db: Path, questions: list[Question], answers: Path, folder: Path,
                notebooks: dict[str, str] | None = None) -> dict[str, Path]:
    """One page per question (`<folder>/<n>.html`, in the questions' order), with its answer and transcript where
    `answers` has them, and an index linking them (and the rendered `notebooks`); returns uuid -> page."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"cannot create {folder}: {e.strerror}") from None
    answered, transcripts = by_uuid(answers), by_uuid(transcripts_path(answers))
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
                                       f"<style>{STYLE}</style><h1>Cases</h1>{notebook_links(notebooks or {})}"
                                       "<table><tr><th>case</th>"
                                       f"<th>answer</th><th>reason</th></tr>{index}</table>")
    return pages


def pages_and_notebooks(folder: Path, answers: list[Path], db: Path, questions: list, input_: Path,
                        working=lambda what: nullcontext()) -> tuple[dict, dict]:
    """A page per case of each answers file (in `folder`/cases-K) and the notebooks run on the store, for the
    report to link."""
    from .notebooks import render_notebooks

    pages = {}
    with working("writing case pages"):
        for k, path in enumerate(answers, 1):
            pages[str(path)] = {u: p.relative_to(folder).as_posix() for u, p in
                                write_pages(db, questions, path, folder / f"cases-{k}").items()}
    with working("running the notebooks on the store"):
        notebooks = render_notebooks(db, input_, folder)
    return pages, notebooks
