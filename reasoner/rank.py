"""The `rank` agent: the ranking's top option as the answer, with no model. It is also what the
`llm` agent answers when the model fails, so that every case gets the evidence-backed answer."""

from __future__ import annotations

import re
from collections.abc import Sequence

from features.digest import Digest
from features.evidence import fmt, signal_of
from features.evidence.logs import ERROR_WORDS, LEVELS, PLACEHOLDER, WHERE
from features.path import failed, slowed, troubled, written
from features.ranker import METRIC_KINDS, UPWARD

REASON_WORDS = 40
OBSERVATION_WORDS = 20
ACTIONS = {"metric": "MetricAnalysis", "changepoint": "MetricAnalysis", "silence": "MetricAnalysis",
           "log": "LogSearch", "trace": "TraceAnalysis", "event": "TraceAnalysis"}
CORROBORATION = 4  # the other keys of its own evidence a reason names besides its key
CHECKED = 2  # and the keys a check of the llm agent found moving besides
STRONG = 0.5  # of the strongest key's strength: a key this strong goes by signal, one weaker after them
SET_ASIDE = 2  # candidates after the chosen one that the trace says why it set aside
STEPS = 5  # at most, in a trace (the challenge's efficiency falls past five)
MOVES = 3  # metrics a step gives with how they moved, before the rest by name alone
NAMED = ("metric", "changepoint", "silence", "log", "event")  # evidence keyed by a metric name or log keywords
# How a value moved, as the evidence lines write it: "0.09 -> 1.9", "26 -> 1.1k ms", "in 100% of spans, now 0%".
ARROW = re.compile(r"(-?[\d.]+[kMG%]?) -> (-?[\d.]+[kMG%]?)( ms)?")
SHARE = re.compile(r"in (\d+%) of spans, now (\d+%)")
SCALE = {"k": 1e3, "M": 1e6, "G": 1e9, "%": 1.0}


def action(item) -> str:
    """The analysis that reads an item: its family's, but a pair of log lines is found in the logs."""
    return "LogSearch" if item.logged else ACTIONS.get(item.kind, "MetricAnalysis")


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


def reason(component: str, fault_type: str, key: str, evidence: list, checked: Sequence[str] = (),
           felt: Sequence = ()) -> str:
    """One sentence: the fault type in the component, the key metric or keyword and how it moved (in how many
    pods); where none of its own metrics moved, the metric that moved most where it was felt (`felt`, in the
    components it explains); then the other keys of its own evidence, of other signals than the key's first
    (`diverse`) among those at least `STRONG` of the strongest's strength (a second measure of a strong signal says
    more than a weak signal), and what a check of it found besides (`checked`)."""
    own = _own(evidence)
    first = next((e for e in own if e.key == key), None)
    pods = len({e.component for e in own if e.key == key})
    head = f"{fault_type[:1].upper()}{fault_type[1:]} in {component}: {key}" + (moved(first) if first else "")
    head += f" in {pods} pods" if pods > 1 else ""
    if felt and not any(e.kind in METRIC_KINDS | {"silence"} for e in own):
        head += f"; felt in {felt[0].component} as {said(felt[0])}"
    strength: dict[str, float] = {}
    for e in own:
        strength[e.key] = max(strength.get(e.key, 0.0), e.blame)
    floor = STRONG * max(strength.values(), default=0.0)
    keys = list(dict.fromkeys([key, *(e.key for e in own)]))
    strong = [k for k in keys if strength.get(k, 0.0) >= floor]
    others = [k for k in diverse(strong) + [k for k in keys if k not in strong] if k != key][:CORROBORATION]
    others += [k for k in dict.fromkeys(checked) if k != key and k not in others][:CHECKED]
    while others and len(f"{head}; also {', '.join(others)}.".split()) > REASON_WORDS:
        others.pop()
    return f"{head}; also {', '.join(others)}." if others else f"{head}."


def where_felt(digest: Digest, component: str) -> list:
    """Where `component`'s fault was felt: the latency and error metrics of the candidates it explains (what travels
    up the calls to a cause), strongest first."""
    return sorted((e for c in digest.candidates if c.explained_by == component for e in c.found or c.evidence
                   if e.kind in METRIC_KINDS and e.signal in UPWARD), key=lambda e: -e.blame)


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
    line = WHERE.sub(" ", item.text.split(": ", 1)[-1])
    return list(dict.fromkeys(w.strip("\"'.,:;()[]=").lower() for w in line.split() if ERROR_WORDS.search(w)))


CODE = re.compile(r"code = (\w+)")
CLAUSE = re.compile(r": |desc = ?|rpc error|code = ?\w*")
JSON_TAIL = re.compile(r'",\s*"\w+":.*$')  # the rest of a JSON log record after its message
ADDRESS = re.compile(r"\d+\.\d+\.\d+\.\d+|<IP>|^dial tcp|^transport$|^connection error$")  # where, not what
# None is what failed: a correlation id and its label, a stack frame ("at a.B.c(B.java:12)"), the quoted URL a
# request went to (where, as an address is: 'I/O error on request for "http://cart:8080/api": Connection reset').
BESIDE = re.compile(r"\b(?:trace|span)[ _-]?id\b\s*[:=]?|\b[0-9a-f]{16,}\b|\s+at [\w$.<>]+\([^)]*\)|"
                    r"(?:\s+for)?\s+\"https?://[^\s\"]*[^\s\":]\"?", re.I)


# Who wrote a line, before what it says: a logger's dotted name ("i.c.InsidePaymentController GCHelper: ...").
LOGGER = re.compile(r"^[a-z][\w$]*(?:\.[\w$]+)+\s+(?=\S)")


def _bare(line: str) -> str:
    """A line without its JSON record tail, placeholders, ids and stack frames."""
    return BESIDE.sub("", PLACEHOLDER.sub("", JSON_TAIL.sub("", line)))


def _message(bare: str) -> str:
    """What a line (`_bare`) says: without its severity and its logger (the step names who logged it)."""
    line = bare.strip(' {}"')
    head, _, rest = line.partition(" ")
    return LOGGER.sub("", rest.strip() if LEVELS.match(head) else line, count=1)


def _parts(line: str) -> tuple[str, str, str]:
    """An error line as errors wrap one another: what the caller was doing (its first clause), the status codes it
    passed on, and the innermost errors (its last two clauses that name no address, where it has more than one)."""
    line = _message(re.sub(r"\[[^\]]*\]", "", _bare(line)))
    clauses = [" ".join(c.split()) for c in (c.strip(" '\"") for c in CLAUSE.split(line)) if c]
    inner = [c for c in clauses[1:] if not ADDRESS.search(c)][-2:]  # what went wrong, not where it was dialled
    return (clauses[0] if clauses else "", ", ".join(dict.fromkeys(CODE.findall(line))), ": ".join(inner))


def gist(item) -> str:
    """A log item's line as an operator quotes it ("could not retrieve cart: Internal, Unavailable: no such host")."""
    return ": ".join(p for p in _parts(item.line) if p)


def _call(hop) -> str:
    """The call of a hop into the next one, where it failed or slowed: "calls errors 0%->22%, p95 30->600 ms"."""
    c = hop.call
    if not troubled(c):
        return ""
    said = [f"errors {c['err_before']:.0%}->{c['err']:.0%}"] if failed(c) else []
    if slowed(c):
        said.append(f"p95 {fmt(c['p95_before'] / 1000)}->{fmt(c['p95'] / 1000)} ms")
    return f"calls {', '.join(said)}"


def _at(hop) -> str:
    return f" from {hop.onset:%H:%M}" if hop.onset else ""


def _moved(hop, cause: bool) -> str:
    """What moved in a hop, in a few words: in a component on the way, what tells the fault reached it (latency and
    errors travel up the calls: the strongest metric of each), else its strongest metric; in the cause its own trace
    evidence first (its metrics and logs have steps of their own, its traces not, where a path is walked)."""
    metrics = [e for e in hop.items if e.kind in ("metric", "changepoint")]
    if cause:
        found = next((e for e in hop.items if e.kind == "trace" and not e.echo), None) or \
            next((e for e in metrics if not e.echo), None)
        return brief(found) if found else ""
    each = [e for e in (next((m for m in metrics if m.signal == s), None) for s in sorted(UPWARD)) if e]
    return ", ".join(brief(e) for e in sorted(each or metrics[:1], key=lambda e: -e.blame))


def _statuses(hop) -> str:
    """An entry's answers as its access log gives them, each code with its count in the window and (before it), the
    codes that rose first, a word each: "http.resp.status 500:37(0) 200:1.1k(1.3k)"; nothing where none moved."""
    if not any(moved_count(now, then) for _, now, then in hop.statuses):
        return ""
    said = [f"{code}:{fmt(now)}({fmt(then)})" for code, now, then in hop.statuses[:3]]
    return f"http.resp.status {' '.join(said)}"


def moved_count(now: int, then: int) -> bool:
    """Whether a count rose or fell by half or more (and by more than a few)."""
    return abs(now - then) > 3 and (now >= 1.5 * then or then >= 1.5 * now)


def _quoted(items: list) -> list[str]:
    """A component's error lines in its own words, each once: what failed, its codes, its innermost error."""
    return list(dict.fromkeys(f"'{gist(e)}'" for e in items if e.kind == "log" and failing(e)))


def entry_step(hop) -> dict | None:
    """Where users meet the fault: the entry's answers (its status codes in the window against before) and its own
    error lines, as its log writes them."""
    said = [x for x in (_statuses(hop), ", ".join(_quoted(hop.items)[:2])) if x]
    if not said:
        return None
    return {"action": f"LogSearch({hop.component})",
            "observation": words(f"{hop.component} {'; '.join(said)}", OBSERVATION_WORDS)}


def path_steps(hops: list) -> list[dict]:
    """The fault's way from the entry to the cause: where users meet it (the entry's answers and lines), the calls
    along it with what moved in each component and when it started, then the error lines each caller on the way
    logged, in its own words."""
    said = []
    for h in hops:
        moved = _moved(h, cause=h is hops[-1])
        said.append(" ".join(x for x in (f"{h.component}{_at(h)}", moved, _call(h)) if x))
    first = entry_step(hops[0])
    steps = [first] if first else []
    steps.append({"action": f"TraceAnalysis({written(hops)})",
                  "observation": words(f"{written(hops)}; " + "; ".join(said), OBSERVATION_WORDS)})
    callers = {h.component: _quoted(h.items)[:2] for h in hops[1 if first else 0:-1]}
    callers = {c: lines for c, lines in callers.items() if lines}
    if callers:
        steps.append({"action": f"LogSearch({', '.join(callers)})",
                      "observation": words("; ".join(f"{c} logs {', '.join(lines)}" for c, lines in callers.items()),
                                           OBSERVATION_WORDS)})
    return steps


def _metrics(items: list) -> list[str]:
    """The metrics that moved, by the names the dump gives them: the strongest of each signal (cpu, memory, network,
    latency, errors...) first, the first few with how they moved ("pod_cpu_usage 0.09->1.9"), then the others by
    name alone, so that as many names as can be come within the words a step is read to; one that fell to nothing
    says so ("pod_processes->0")."""
    moves: dict[str, str] = {}
    for e in items:
        said = brief(e)
        name = said.split()[0]
        moves.setdefault(name, f"{name}->0" if said.endswith("->0") else said)
    return [moves[n] if i < MOVES else n for i, n in enumerate(diverse(list(moves)))]


def diverse(names: list[str]) -> list[str]:
    """Names in their order, the first of each signal (cpu, memory, network, latency, errors...) before the second of
    any: four network series say less than one of each of four signals. A name of no known signal is its own."""
    first: dict[str, str] = {}
    for name in names:
        first.setdefault(name if signal_of(name) == "other" else signal_of(name), name)
    return list(first.values()) + [n for n in names if n not in first.values()]


def _logs(items: list) -> list[str]:
    """Each line once, under the first component that logs it: an error line quoted by its first words as the log
    writes them (one that wraps others by what failed and its innermost errors), another by its keyword."""
    said: dict[str, str] = {}
    for e in items:
        if not failing(e):
            said.setdefault(e.key, e.component)
            continue
        quoted = gist(e) if _parts(e.line)[2] else words(_message(_bare(e.line or e.key)), LINE_WORDS)
        said.setdefault(f"'{quoted}'", e.component)
    by: dict[str, list[str]] = {}
    for quoted, component in said.items():
        by.setdefault(component, []).append(quoted)
    return [f"{component} logs {', '.join(quoted)}" for component, quoted in by.items()]


LINE_WORDS = 7  # of a line quoted by its first words: what it says, and three such lines to a step


def evidence_steps(digest: Digest, component: str) -> list[dict]:
    """How the answer was reached, as the fault travelled (at most `STEPS` steps): where users met it and the way it
    took from the entry to the chosen component (where it has one), with what its callers logged; the chosen
    component's own evidence, one step per kind of analysis (its metrics by name, its log lines, its traces: these
    told on the way where it was walked), each naming what moved in it; then, where a step is left, the next
    candidates and why they were set aside."""
    chosen = next((c for c in digest.candidates if c.component == component), None)
    if chosen is None:
        return []
    hops = digest.paths.get(component, [])
    walked = len(hops) > 1
    steps = path_steps(hops) if walked else []
    for analysis in dict.fromkeys(ACTIONS.values()):
        if walked and analysis == "TraceAnalysis":
            continue
        items = [e for e in chosen.found or chosen.evidence if action(e) == analysis and not e.echo]
        said = _metrics(items) + (hops[-1].also if hops else []) if analysis == "MetricAnalysis" else \
            _logs(items) if analysis == "LogSearch" else list(dict.fromkeys(brief(e) for e in items))
        if said:
            steps.append({"action": f"{analysis}({component})",
                          "observation": words(f"{component} " + ", ".join(said) if analysis == "MetricAnalysis"
                                               else "; ".join(said), OBSERVATION_WORDS)})
    aside = [c for c in digest.candidates if c is not chosen and c.evidence][:SET_ASIDE]
    if aside and len(steps) < STEPS:
        why = [f"{c.component} (" + (f"an echo of its dependency {c.explained_by}" if c.explained_by
                                     else f"weaker, {c.score:.2f} against {chosen.score:.2f}")
               + f"): {brief(c.evidence[0])}" for c in aside]
        steps.append({"action": f"{action(aside[0].evidence[0])}"
                                f"({', '.join(c.component for c in aside)})",
                      "observation": words(f"set aside {'; '.join(why)}", OBSERVATION_WORDS)})
    return steps[:STEPS]


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
            "reason": reason(top.component, fault_type, key, top.found or top.evidence,
                             felt=where_felt(digest, top.component)),
            "reasoning_trace": trace_of(evidence_steps(digest, top.component))}
