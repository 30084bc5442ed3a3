"""Logs: templates (Drain3) that appear or surge in a component's logs in the window. Templates with
lines at an error severity in the window, or with error words, count fully; others count little. The template text is untrusted data: flattened and
quoted wherever it is shown.

A component's lines that follow its load are its users', not a fault's: where its ordinary templates (no error
lines, no error words) all rose by one factor of `LOAD` or more, a template's rise is counted beyond that factor (a
flood through the entry triples its access log, errors with it, as it does its requests). Less is a window's own
variation, or a fault's (a code fault that takes another branch writes more of some ordinary lines).

A template that surges in several components at once is shared among them; a steady template
that stops while its component goes on logging counts too. The baseline is the hour before; where a dump keeps logs only around incidents (no lines in
that hour), it is every other logged minute within `TRACE_REACH`, as for traces.

A line that names another service of the system ("No instances available for ts-train-service", "connection
refused by cartservice") reports trouble reaching that service: it is an echo on the component that logs it.
Not a name that failed to resolve ("lookup redis-cart on 10.0.0.10:53: no such host"): a cluster's DNS
answers for a service whatever its health, so the resolving pod's own resolver failed; unless that one name fails
while the pod's calls into other services are answered: then its resolver works, and the name is gone (a
deleted service, an address that leads nowhere)."""

from __future__ import annotations

import re
from collections import Counter

from . import BASELINE, GAP, TRACE_REACH, Item, Window, flat, rows

ERROR_WORDS = re.compile(r"error|fail|exception|refused|timeout|unavailable|deadline|cancel|panic|reset|"
                         r"no such host|denied|unhealthy|fatal|severe|warn|throw|gc|stress|latency", re.I)
OTHER_WEIGHT = 0.4
VANISHED = 0.6
STEADY = 0.9  # share of the baseline's minutes a template must appear in for its stop to count
MIN_EXPECTED = 10.0  # lines a vanished template would have written in the window at its rate before
LOAD = 1.5  # the least factor of a component's ordinary lines that is its load (a flood: 2.5 to 4)
KEYWORD = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{3,}")
RESOLVER = re.compile(r"no such host|\blookup\b|name resolution|could not resolve|unknown ?host|NXDOMAIN", re.I)
HEX_ID = re.compile(r"^[0-9a-fA-F]{12,}$")  # a trace or span id a line carries is no keyword
LEVELS = re.compile(r"^(trace|debug|info|notice|warn|warning|error|err|fatal|critical|severe)$", re.I)
# Where a line was written (a code position, `logger#line`, as etl.loglines finds it; Drain masks its number) is
# no word of what it says: 'Cancel' in c.s.CancelServiceImpl#<NUM> is a class's name.
WHERE = re.compile(r"[^\s#]+#(?:[0-9]+|<NUM>|<\*>)")


PLACEHOLDER = re.compile(r"<\*>|<(?:UUID|IP|HEX|ID|NUM)>")


def verbatim(template: str, line: str) -> str:
    """The template with its placeholders filled from a line of it (a rule's or a callee's name is often
    what Drain3 made a variable); the template itself where the line does not align with it."""
    constants = PLACEHOLDER.split(template)
    if len(constants) == 1:
        return template
    # Drain3 splits a line at whitespace: a space of the template stands for any run of it in the line
    found = re.search(r"(\S+)".join(r"\s+".join(map(re.escape, c.split(" "))) for c in constants), line)
    if not found:
        return template
    return "".join(c + (found.group(i + 1) if i < len(constants) - 1 else "") for i, c in enumerate(constants))


def keyword(template: str) -> str:
    """A checkable keyword of a template: its first word that names an error (a severity alone does not),
    with the word before it, else its longest word."""
    words = [w.strip("._-") for w in KEYWORD.findall(WHERE.sub(" ", template))
             if not LEVELS.match(w) and not HEX_ID.match(w)]
    for i, word in enumerate(words):
        if ERROR_WORDS.search(word):
            return " ".join(words[max(0, i - 1):i + 1])
    return max(words, key=len, default="")


def naming(services: list[str]) -> re.Pattern | None:
    """A pattern that finds the services' names as whole words, the longest first where one name holds another."""
    if not services:
        return None
    names = "|".join(re.escape(s) for s in sorted(services, key=len, reverse=True))
    return re.compile(rf"(?<![\w-])(?:{names})(?![\w-])")


def _gone(con, w: Window, r: dict, name: str, services: re.Pattern) -> bool:
    """Whether a name a component's lines failed to resolve is gone, not its resolver broken: its lines in the
    window that fail to resolve name no other service, and its calls into another service were answered."""
    named = {s for line, in con.execute("""select distinct message from log_lines where component = ? and ts >= ?
                                           and ts < ? + interval 1 minute and regexp_matches(message, ?) order by message limit 200""",
                                        [r["component"], w.start, w.end, "(?i)" + RESOLVER.pattern]).fetchall()
             for s in services.findall(line) if s != r["service"]}
    return named == {name} and bool(con.execute(
        """select 1 from trace_edge_minute where caller = ? and callee <> ? and callee_pod is not null
           and minute >= ? and minute <= ? limit 1""", [r["service"], name, w.start, w.end]).fetchall())


def baseline_minutes(con, w: Window) -> tuple[str, list]:
    """A SQL condition on `minute` for the baseline, and its parameters, and how many logged minutes it has."""
    hour = ("minute >= ? and minute < ?", [w.start - BASELINE, w.start - GAP])
    (n,), = con.execute(f"select count(distinct minute) from log_template_minute where {hour[0]}", hour[1]).fetchall()
    if n >= (BASELINE - GAP).total_seconds() / 60 / 2:
        return *hour, n
    reach = ("minute >= ? and minute <= ? and (minute < ? or minute > ?)",
             [w.start - TRACE_REACH, w.end + TRACE_REACH, w.start - GAP, w.end + GAP])
    (n,), = con.execute(f"select count(distinct minute) from log_template_minute where {reach[0]}", reach[1]).fetchall()
    return *reach, n


def collect(con, w: Window) -> list[Item]:
    minutes = max((w.end - w.start).total_seconds() / 60, 1)
    condition, params, base_minutes = baseline_minutes(con, w)
    base_minutes = max(base_minutes, 1)
    # A component's load is its ordinary templates' median factor (no error lines either side, no error words,
    # enough lines expected) where it is LOAD or more, else 1 (a fault that slows a component writes fewer ordinary
    # lines, and its errors then count in full); a template counts only beyond it.
    found = rows(con, f"""
        with d as (select component, any_value(service) as service, template_id, sum(lines) / ? as rate,
                          sum(errors) as errors
                   from log_template_minute where minute >= ? and minute <= ? group by all),
             b as (select component, template_id, sum(lines) / ? as rate, sum(errors) as errors
                   from log_template_minute where {condition} group by all),
             j as (select d.component, d.service, d.template_id, t.template, d.rate as during,
                          coalesce(b.rate, 0) as before, d.errors, b.errors as errors_before,
                          regexp_matches(regexp_replace(t.template, ?, ' ', 'g'), ?) as worded
                   from d join log_templates t using (template_id) left join b using (component, template_id)),
             usual as (select component, median(during / before) as factor from j
                      where errors = 0 and errors_before = 0 and before * ? >= ? and not worded
                      group by component having factor >= ?)
        select j.*, coalesce(usual.factor, 1) as factor from j left join usual using (component)
        where during > 2 * before * coalesce(usual.factor, 1) + 0.05
        order by during - before desc, component, template_id limit 200""",
                 [minutes, w.start, w.end, base_minutes, *params, WHERE.pattern, "(?i)" + ERROR_WORDS.pattern,
                  minutes, MIN_EXPECTED, LOAD])
    # The same template surging in several components at once travels with the calls (an exception
    # rethrown up the chain): each of them gets a share of it; a cause's own template is its alone.
    spread = Counter(r["template_id"] for r in found)
    lines = {(r["component"], r["template_id"]): r["line"] for r in rows(con, """
        select component, template_id, arg_min(message, (ts, message)) as line from log_lines
        where ts >= ? and ts < ? + interval 1 minute and template_id in (select unnest(?)) group by all""",
        [w.start, w.end, list(spread)])} if found else {}
    services = naming([s for s, in con.execute("select distinct service from placement where service is not null")
                       .fetchall()])
    items = []
    for r in found:
        expected = r["before"] * r["factor"]
        errorlike = bool(r["errors"]) or r["worded"]
        rise = (r["during"] - expected) / (r["during"] + expected + 0.5) / spread[r["template_id"]]
        new = "new" if r["before"] == 0 else f"x{r['during'] / r['before']:.0f}"
        new += f", its other lines x{r['factor']:.1f}" if r["factor"] > 1 else ""
        new += f", {r['errors']} at error level" if r["errors"] else ""
        said = verbatim(r["template"], lines.get((r["component"], r["template_id"])) or "")
        peer = None if services is None else next((s for s in services.findall(said) if s != r["service"]), None)
        if peer and RESOLVER.search(said) and not _gone(con, w, r, peer, services):
            peer = None
        items.append(Item(r["component"], "log", rise * (1.0 if errorlike else OTHER_WEIGHT), keyword(said),
                          f"log {r['component']} ({new}, {r['during']:.1f}/min): \"{flat(r['template'])}\"", "log",
                          echo=peer is not None, peer=peer, line=said))
    # A template that was steady and stops (a heartbeat, a worker loop) while the component still logs.
    for r in rows(con, f"""
            with b as (select component, template_id, sum(lines) / ? as rate from log_template_minute
                       where {condition} group by all
                       having sum(lines) / ? * ? >= ? and count(*) >= ? * ?),  -- steady: nearly every minute
                 d as (select component, template_id, sum(lines) as n from log_template_minute
                       where minute >= ? and minute <= ? group by all)
            select b.component, t.template, b.rate from b join log_templates t using (template_id)
            where not exists (select 1 from d where d.component = b.component and d.template_id = b.template_id)
            and exists (select 1 from d where d.component = b.component)""",
                  [base_minutes, *params, base_minutes, minutes, MIN_EXPECTED, STEADY, base_minutes, w.start, w.end]):
        items.append(Item(r["component"], "log", VANISHED, keyword(r["template"]),
                          f"log {r['component']} stopped ({r['rate']:.1f}/min before): \"{flat(r['template'])}\"",
                          "log", line=r["template"]))
    return items
