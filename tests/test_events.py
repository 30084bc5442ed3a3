"""Events in their traces: log lines placed in their spans, code positions kept verbatim, expected paths
against actual ones (a pair that breaks in the callee while the caller's paths hold), and a real Nezha CSV
dialect (tabs and broken quotes inside log lines)."""

import datetime as dt

import pytest
from test_ranking import END, MINUTES, START, T0, Tiny, digest, during

from etl import store
from features.evidence import Window, events, traces
from features.ranker import ANOMALOUS
from features.refresh import nightly

FRONT = ["F.c.FrontController#10", "F.c.FrontController#20"]
ORDER = ["o.s.OrderServiceImpl#5", "o.s.OrderServiceImpl#7", "o.s.OrderServiceImpl#9"]


def shaped(t: Tiny, shape):
    """Four traces a minute, each of the spans `shape(minute, k)` gives in the order they start: (service, the index
    of its parent span or None, operation, the code positions it logs in order)."""
    spans, lines, services = [], [], set()
    for i in range(MINUTES):
        for k in range(4):
            trace, ts = f"t{i}-{k}", T0 + dt.timedelta(minutes=i, seconds=k * 10)
            drawn = shape(i, k)
            took = [5_000] * len(drawn)  # a leaf's time; a parent's is 2 ms of its own and its calls one by one
            for n in reversed(range(len(drawn))):
                if any(parent == n for _, parent, _, _ in drawn):
                    took[n] = 2_000 + sum(took[c] for c, (_, parent, _, _) in enumerate(drawn) if parent == n)
            for n, (service, parent, operation, positions) in enumerate(drawn):
                span = f"{trace}-{n}"
                spans.append((trace, span, None if parent is None else f"{trace}-{parent}",
                              ts + dt.timedelta(microseconds=n), took[n], service, f"{service}-0", "node-1",
                              operation, None, None, 1))
                for j, position in enumerate(positions):
                    at = ts + dt.timedelta(milliseconds=1 + n * 5 + j)
                    lines.append((at, f"{service}-0", service, "node-1", 1, f"12:00:00.000 INFO {position} did",
                                  1, "INFO", trace, span, position))
                services.add(service)
    t.con.executemany("insert into spans (trace_id, span_id, parent_span_id, ts, duration_us, service, pod, node, "
                      "operation, kind, status_code, file_id) values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", spans)
    t.con.execute("insert or ignore into log_templates values (1, 'INFO <*> did', null, 0)")
    t.con.executemany("insert into log_lines (ts, component, service, node, template_id, message, file_id, level, "
                      "trace_id, span_id, event) values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", lines)
    for service in sorted(services):
        t.place(f"{service}-0", service)
    return t.done()


def logged_traces(t: Tiny, front=FRONT, order=ORDER, front_fault=None, order_fault=None, asks_order=True,
                  faulty=during, asks_for="op", front_faulty=None):
    """Front's span calls order's operation `op`; each logs its code positions in order. In the `faulty` minutes
    (the window's), `*_fault` replaces a service's positions (front's in `front_faulty`, if given), front calls
    order only if it `asks_order`, and then for operation `asks_for`."""
    def shape(i, k):
        broken = faulty(i)
        spans = [("front", None, "op", front_fault if front_fault is not None and (front_faulty or faulty)(i)
                  else front)]
        if asks_order or not broken:
            spans.append(("order", 0, asks_for if broken else "op",
                          order_fault if order_fault is not None and broken else order))
        return spans
    return shaped(t, shape)


@pytest.fixture
def tiny(tmp_path):
    t = Tiny(tmp_path / "tiny.duckdb")
    yield t
    t.con.close()


def window():
    return Window.around(T0 + dt.timedelta(minutes=90), END)


def test_a_pair_that_breaks_in_the_callee_while_the_caller_s_paths_hold(tiny):
    con = logged_traces(tiny, order_fault=[ORDER[0], ORDER[2]])  # #7 skipped: a wrong return, an exception
    found = events.collect(con, window())
    assert [(i.component, i.key, i.echo) for i in found] == [
        ("order", "o.s.OrderServiceImpl#5_o.s.OrderServiceImpl#7", False)]
    assert found[0].score > 0.8 and "now 0%" in found[0].text and found[0].logged  # two log lines' positions
    d = digest(con)
    assert d.candidates[0].component == "order"
    assert d.options["order"][0].fault_type == "code error"
    assert d.options["order"][0].key == "o.s.OrderServiceImpl#5_o.s.OrderServiceImpl#7"


def test_a_caller_whose_path_changes_with_its_callee_s_is_an_echo(tiny):
    con = logged_traces(tiny, front_fault=[FRONT[0], "F.c.FrontController#30"], order_fault=[ORDER[0], ORDER[2]])
    found = {i.component: i for i in events.collect(con, window())}
    assert not found["order"].echo
    assert found["front"].echo and "its callees order changed too" in found["front"].text
    assert digest(con).candidates[0].component == "order"


def test_where_lines_and_calls_break_in_the_same_spans_the_lines_place_the_break(tiny):
    """Seen on a simulated Train Ticket: a method threw after its first line, and its database call after it was
    never made. Both pairs broke in the same spans, as strongly; the lines say where in the code it broke (as Nezha
    labels it), the calls track only that a call was not made."""
    def shape(i, k):
        if during(i):
            return [("front", None, "op", FRONT), ("order", 0, "/place", [ORDER[0]])]
        return [("front", None, "op", FRONT), ("order", 0, "/place", ORDER), ("stock", 1, "op", [])]

    found = {i.component: i for i in events.collect(shaped(tiny, shape), window())}
    assert found["order"].key == f"{ORDER[0]}_{ORDER[1]}"


def test_a_path_that_vanishes_is_found_where_the_service_still_serves(tiny):
    con = logged_traces(tiny, order_fault=[])  # an exception before the first line: order's spans log nothing
    found = events.collect(con, window())
    assert [(i.component, i.key, i.echo) for i in found] == [("order", "op start_o.s.OrderServiceImpl#5", False)]
    assert "now 0%" in found[0].text and "now by 'op end'" in found[0].text
    assert digest(con).candidates[0].component == "order"


def test_a_path_that_vanished_because_its_caller_stopped_asking_is_the_caller_s(tiny):
    """Seen on an Online Boutique day: an exception in the frontend after it placed an order skipped its next
    call; the callee's spans vanished with it, and its own paths held."""
    con = logged_traces(tiny, asks_order=False)
    found = events.collect(con, window())
    assert [(i.component, i.key, i.echo) for i in found] == [("front", "op calls start_call order op", False)]
    assert "now 0%" in found[0].text and "now by 'op calls end'" in found[0].text
    assert digest(con).candidates[0].component == "front"


def test_a_change_in_part_of_the_window_is_measured_over_its_own_minutes(tiny):
    """A three-minute wrong return in a ten-minute scan window (Train Ticket 2023-01-29 09:03): over the whole
    window the broken pair still held in half the spans, and a slow link beside it outweighed it."""
    con = logged_traces(tiny, order_fault=[ORDER[0], ORDER[2]], faulty=lambda i: 93 <= i <= 95)
    found = events.collect(con, Window(T0 + dt.timedelta(minutes=90), T0 + dt.timedelta(minutes=100)))
    assert [(i.component, i.key) for i in found] == [("order", "o.s.OrderServiceImpl#5_o.s.OrderServiceImpl#7")]
    assert found[0].score > 0.7 and "now 0% of 12 in 09:33-09:35" in found[0].text


@pytest.mark.parametrize("front_from, order_from, order_to", [(90, 100, 110), (100, 90, 95)])
def test_a_change_explains_none_that_began_before_it_or_after_it_ended(tiny, front_from, order_from, order_to):
    """Seen on a Train Ticket morning: a service's own wrong return began at 09:31; a callee's path broke at 09:33
    for two minutes, and made the first an echo of it (and of the next wrong return, at 09:35)."""
    con = logged_traces(tiny, front_fault=[FRONT[0], "F.c.FrontController#30"], order_fault=[ORDER[0], ORDER[2]],
                        front_faulty=lambda i: front_from <= i <= 110, faulty=lambda i: order_from <= i <= order_to)
    found = {i.component: i for i in events.collect(con, window())}
    assert not found["front"].echo and not found["order"].echo


def test_a_first_call_that_changed_with_its_caller_s_path_is_the_caller_s(tiny):
    """Seen on an Online Boutique day: the frontend's wrong return made it ask the ad service for random ads; the
    ad service's first call changed (its input chose it, before any callee answered) and outranked the frontend,
    whose own first call changed as well."""
    rows = []
    for i in range(MINUTES):
        for k in range(4):
            trace, ts = f"t{i}-{k}", T0 + dt.timedelta(minutes=i, seconds=k * 10)
            rows.append((trace, f"{trace}-front", None, ts, 50_000, "front", "front-0", "node-1", "op", None, None, 1))
            if during(i):  # front asks ads first now, then order
                rows.append((trace, f"{trace}-ads", f"{trace}-front", ts + dt.timedelta(milliseconds=1), 1_000,
                             "ads", "ads-0", "node-1", "op", None, None, 1))
            rows.append((trace, f"{trace}-order", f"{trace}-front", ts + dt.timedelta(milliseconds=2), 30_000,
                         "order", "order-0", "node-1", "op", None, None, 1))
            rows.append((trace, f"{trace}-cat", f"{trace}-order", ts + dt.timedelta(milliseconds=3), 10_000,
                         "cat", "cat-0", "node-1", "y" if during(i) else "x", None, None, 1))
    tiny.con.executemany("insert into spans (trace_id, span_id, parent_span_id, ts, duration_us, service, pod, node, operation, "
                         "kind, status_code, file_id) values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    for service in ("front", "order", "ads", "cat"):
        tiny.place(f"{service}-0", service)
    found = {i.component: i for i in events.collect(tiny.done(), window())}
    assert not found["front"].echo and found["front"].key == "op calls start_call order op"
    assert not found["front"].logged  # a calls track's, read in the spans
    assert found["order"].echo and "its callers front changed their paths too" in found["order"].text


def test_a_callee_asked_for_another_operation_keeps_its_paths(tiny):
    """Seen on an Online Boutique day: the frontend asked the ad service for random ads, not ads by category; both
    operations run the same query, and what followed it told only which operation ran. The caller's path did
    change: it calls another operation."""
    found = events.collect(logged_traces(tiny, asks_for="other"), window())
    assert [(i.component, i.key) for i in found] == [("front", "op calls start_call order op")]


def test_paths_that_hold_are_no_evidence(tiny):
    assert events.collect(logged_traces(tiny), window()) == []


def test_a_branch_taken_two_times_in_three_at_one_request_a_minute_is_no_change(tiny):
    """Seen at a hundredth of a day's traffic: an operation that ran once a minute took one branch two times in
    three; the median of its minutes' shares (each 0 or 1) said it always had, and every window found it changed."""
    def shape(i, k):
        return [("front", None, "op", [FRONT[0], FRONT[1] if i % 3 else "F.c.FrontController#30"])] if k == 0 else []
    assert events.collect(shaped(tiny, shape), window()) == []


LOG_HEADER = "Timestamp,TimeUnixNano,Node,PodName,Container,TraceID,SpanID,Log\n"
TRACE_HEADER = "TraceID,SpanID,ParentID,PodName,OperationName,StartTimeUnixNano,EndTimeUnixNano,Duration\n"


def nezha_minute(root, log_rows: list[str]):
    day = root / "rca_data" / "2023-01-29"
    for sub in ("log", "trace"):
        (day / sub).mkdir(parents=True, exist_ok=True)
    (day / "log" / "10_06_log.csv").write_text(LOG_HEADER + "".join(log_rows))
    (day / "trace" / "10_06_trace.csv").write_text(
        TRACE_HEADER + "aa11,bb22,root,ts-travel-service-64469b5b48-25zj6,queryInfo,"
                       "1674986763000000000,1674986763500000000,500000\n"
                       "aa11,cc33,bb22,ts-basic-service-5dc8d4f9fd-46997,queryForTravel,"
                       "1674986763400000000,1674986763450000000,50000\n")
    (day / "2023-01-29-fault_list.json").write_text("{}")
    return root


def line(position: str, text: str, trace="aa11", span="bb22", ms=361) -> str:
    log = f'{{""log"":""18:06:03.361 INFO  {position} TraceID: {trace} SpanID: {span} {text}\\n""}}'
    return (f'2023-01-29T10:06:03.{ms}Z,1674986763361647039,33.33.33.76,ts-travel-service-64469b5b48-25zj6,server,'
            f'{trace},{span},"{log}"\n')


def test_a_log_line_joins_its_span_and_keeps_its_code_position_verbatim(tmp_path):
    dump = nezha_minute(tmp_path / "dump", [line("t.s.TravelServiceImpl#451", "[queryInfo][Query]"),
                                            line("o.a.c.c.C.[.[.[.[dispatcherServlet]#175", "threw exception", ms=362)])
    db = tmp_path / "s.duckdb"
    assert not nightly(dump, db).failed
    con = store.connect(db, read_only=True)
    assert sorted(con.execute("select trace_id, span_id, event from log_lines").fetchall()) == [
        ("aa11", "bb22", "o.a.c.c.C.[.[.[.[dispatcherServlet]#175"), ("aa11", "bb22", "t.s.TravelServiceImpl#451")]
    pairs = con.execute("select a, b from event_pair_minute order by a").fetchall()
    assert ("queryInfo start", "t.s.TravelServiceImpl#451") in pairs
    assert ("t.s.TravelServiceImpl#451", "o.a.c.c.C.[.[.[.[dispatcherServlet]#175") in pairs
    assert ("queryInfo calls start", "call ts-basic-service queryForTravel") in pairs  # its calls: a track apart
    assert ("call ts-basic-service queryForTravel", "queryInfo calls end") in pairs


def test_a_loop_s_repeated_calls_are_one_step(tmp_path):
    dump = nezha_minute(tmp_path / "dump", [line("t.s.TravelServiceImpl#451", "[queryInfo][Query]")])
    with open(dump / "rca_data" / "2023-01-29" / "trace" / "10_06_trace.csv", "a") as f:
        f.write("aa11,dd44,bb22,ts-basic-service-5dc8d4f9fd-46997,queryForTravel,"
                "1674986763460000000,1674986763490000000,30000\n")  # the same call again, as a loop makes it
    db = tmp_path / "s.duckdb"
    assert not nightly(dump, db).failed
    pairs = store.connect(db, read_only=True).execute(
        "select a, b, pairs from event_pair_minute where a like '%call%' order by a").fetchall()
    assert pairs == [("call ts-basic-service queryForTravel", "queryInfo calls end", 1),
                     ("queryInfo calls start", "call ts-basic-service queryForTravel", 1)]


def test_a_store_whose_event_paths_lack_calls_computes_them_on_its_next_run(tmp_path):
    dump = nezha_minute(tmp_path / "dump", [line("t.s.TravelServiceImpl#451", "[queryInfo][Query]")])
    db = tmp_path / "s.duckdb"
    nightly(dump, db)
    con = store.connect(db)
    con.execute("delete from schema_version where name = 'the calls of a span, in event paths'")
    con.close()
    con = store.connect(db)
    assert con.execute("select day from dirty_days").fetchall() == [(dt.date(2023, 1, 29),)]
    con.close()
    assert not nightly(dump, db).failed
    assert store.connect(db, read_only=True).execute("select count(*) from dirty_days").fetchall() == [(0,)]


def test_a_csv_with_tabs_and_broken_quotes_inside_log_lines_loads_the_rest(tmp_path):
    rows = [line("t.s.TravelServiceImpl#451", "[tab\tinside]\t[and\tmore]") for _ in range(30)]
    rows.insert(10, '2023-01-29T10:06:03.361Z,1,33.33.33.76,ts-user-service-6-l,server,cc,dd,"{""log"":""x ]",'
                    'stream"":""stdout"",time"":""t""}"\n')  # a quote lost, as in the real 10_06_log.csv
    dump = nezha_minute(tmp_path / "dump", rows)
    db = tmp_path / "s.duckdb"
    report = nightly(dump, db)
    assert not report.failed, report.failed
    con = store.connect(db, read_only=True)
    assert con.execute("select count(*) from log_lines").fetchall() == [(30,)]
    (note,), = con.execute("select error from manifest where path like '%10_06_log.csv'").fetchall()
    assert note.startswith("1 malformed rows left out (lines 12)")


def test_the_notebook_shows_a_code_level_case_s_broken_pair(tiny, tmp_path, monkeypatch):
    import json

    import nbformat
    from nbclient import NotebookClient
    from test_notebook import NOTEBOOK

    tiny.series("order-0", "CpuUsageRate(%)", 2.0, service="order")
    logged_traces(tiny, order_fault=[ORDER[0], ORDER[2]]).close()
    (tmp_path / "input.json").write_text(json.dumps([{"uuid": "code-1", "Anomaly Description":
                                                      f"from {T0 + dt.timedelta(minutes=90):%Y-%m-%dT%H:%M:%S}Z "
                                                      f"to {END:%Y-%m-%dT%H:%M:%S}Z"}]))
    monkeypatch.setenv("RCALAB_STORE", str(tmp_path / "tiny.duckdb"))
    monkeypatch.setenv("RCALAB_INPUT", str(tmp_path / "input.json"))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert len([o for o in outputs if "image/png" in o.get("data", {})]) == 3
    text = "".join(str(o.get("data", {}).get("text/plain", "")) + o.get("text", "") for o in outputs)
    assert "order: o.s.OrderServiceImpl#5_o.s.OrderServiceImpl#7" in text


def test_a_slow_link_from_another_caller_does_not_explain_a_path_change(tiny):
    """Seen on a Train Ticket morning: a service threw in its own code while a callee of its had one slow link
    in from another caller; counted as the callee's trouble, it made the thrower an echo."""
    for caller in ("x", "y", "w"):  # three of order's four callers reach it over slow links, front does not
        tiny.chain([caller, "order"], slow="order", gap_us=60_000_000)
        tiny.chain([caller, "z"])
    con = logged_traces(tiny, front_fault=[FRONT[0], "F.c.FrontController#30"])
    slow = [i for i in traces.collect(con, window()) if i.signal == "link" and i.component == "order"]
    assert slow and slow[0].peer != "front" and slow[0].share < 1
    found = {i.component: i for i in events.collect(con, window())}
    assert slow[0].blame >= 0.5 * found["front"].score  # as much as would explain front's change, were it on its way
    assert not found["front"].echo


def test_a_path_that_breaks_where_its_caller_s_network_is_slow_is_the_caller_s(tiny):
    """Seen on a Train Ticket day: a network delay on the travel service (calls into it 18 ms -> 4.5 s late) ended
    the spans of the basic service it calls early, as a caller that gives up on a call does; basic's broken path
    outranked travel."""
    for caller in ("x", "y"):
        tiny.chain([caller, "front"], slow="front", gap_us=60_000_000)
    con = logged_traces(tiny, order_fault=[ORDER[0], ORDER[2]])
    found = {i.component: i for i in events.collect(con, window())}
    assert found["order"].echo and "calls from front came over a slow link" in found["order"].text


PAY = ["p.s.PayServiceImpl#3", "p.s.PayServiceImpl#4"]
REFUND = ["r.s.RefundServiceImpl#8", "r.s.RefundServiceImpl#9"]


def failing_stack(t: Tiny, order_logs: bool):
    """Front calls order, then pay. In the window order's answer ends front's operation: front logs its first
    line, calls order and stops (no second line, no call into pay). Order logs its lines where `order_logs`, and
    nothing else shows how it answered (no status: Train Ticket's spans carry none)."""
    def shape(i, k):
        spans = [("front", None, "op", FRONT[:1] if during(i) else FRONT),
                 ("order", 0, "op", ORDER if order_logs else [])]
        return spans if during(i) else spans + [("pay", 0, "op", PAY)]
    return shaped(t, shape)


def test_a_path_that_stops_right_after_a_call_points_at_the_callee_whose_answers_are_unseen(tiny):
    con = failing_stack(tiny, order_logs=False)
    found = {i.component: i for i in events.collect(con, window())}
    assert found["front"].echo and "it broke right after order answered" in found["front"].text
    assert not found["order"].echo and found["order"].text.startswith("front's path broke right after its call")
    assert digest(con).candidates[0].component == "order"


def test_a_path_that_stops_after_a_callee_answered_as_usual_is_the_caller_s(tiny):
    """Order's own paths ran and held: its answer was as usual, and front's code ended front's operation."""
    con = failing_stack(tiny, order_logs=True)
    found = {i.component: i for i in events.collect(con, window())}
    assert list(found) == ["front"] and not found["front"].echo
    assert digest(con).candidates[0].component == "front"


def test_a_caller_sent_another_way_by_a_wrong_return_points_at_who_returned_it(tiny):
    """Order returns a wrong value in half its spans (it skips #7); front, given it, asks refund instead of pay,
    and refund fails on what it is asked (its own path breaks, more than order's). Refund was asked because front
    changed course, and front changed course on order's answer: order is the cause."""
    def shape(i, k):
        wrong = during(i) and k % 2 == 0
        spans = [("front", None, "op", FRONT), ("order", 0, "op", [ORDER[0], ORDER[2]] if wrong else ORDER)]
        spans.append(("refund", 0, "op", REFUND[:1]) if wrong else ("pay", 0, "op", PAY))
        return spans + ([("x", None, "op", []), ("refund", 3 + int(wrong), "op", REFUND)] if k == 1 else [])
    con = shaped(tiny, shape)
    found = {i.component: i for i in events.collect(con, window())}
    assert found["refund"].score > found["order"].score  # refund's own break is the strongest
    assert found["refund"].echo and "its callers front changed their paths too" in found["refund"].text
    assert found["front"].echo and "it broke right after order answered" in found["front"].text
    assert not found["order"].echo
    assert digest(con).candidates[0].component == "order"


def test_a_metric_step_off_the_path_weighs_less_than_a_path_broken_in_the_spans(tiny):
    """Order's own path broke in a third of its spans; cat, which nobody calls and whose paths held, stepped in one
    memory series alone. Nothing felt cat's step; order's callers met its break."""
    tiny.series("cat-0", "pod_memory_working_set_bytes", 100.0, service="cat", fault=400.0)
    con = logged_traces(tiny, order_fault=[ORDER[0], ORDER[2]], faulty=lambda i: during(i) and i % 3 == 0)
    d = digest(con)
    step = next(c for c in d.candidates if c.component == "cat")
    assert step.found[0].score > d.candidates[0].score  # the step alone is the stronger item
    assert d.candidates[0].component == "order"


def test_a_metric_step_outweighs_a_path_that_broke_too_faintly_to_make_its_unit_anomalous(tiny):
    """Order's path broke in one minute of twenty: too little to be an anomaly of its own. A node's CPU that
    stressed its pods is such a step, and a few broken spans somewhere do not make it an echo."""
    tiny.series("cat-0", "pod_memory_working_set_bytes", 100.0, service="cat", fault=400.0)
    con = logged_traces(tiny, order_fault=[ORDER[0], ORDER[2]], faulty=lambda i: i == 100)
    path = [i for i in events.collect(con, window()) if i.component == "order"]
    assert path and 0 < path[0].blame < ANOMALOUS
    assert digest(con).candidates[0].component == "cat"


def test_a_truth_s_code_path_is_found_where_its_share_moved(tiny, tmp_path):
    """The signature check reads Nezha's `A_B` label as a path: A followed by B in the service's spans, a share that
    moved against the hour before. No log line holds the label itself."""
    from testbed.signatures import check

    logged_traces(tiny, order_fault=[ORDER[0], ORDER[2]]).close()
    truth = tmp_path / "truth.jsonl"
    rows = [("wrong return", "order", f"{ORDER[0]}_{ORDER[1]}"), ("exception", "front", f"{FRONT[0]}_{FRONT[1]}")]
    truth.write_text("".join(
        f'{{"fault_type": "{kind}", "instance": "{service}", "start_time": "{START:%Y-%m-%dT%H:%M:%SZ}", '
        f'"end_time": "{END:%Y-%m-%dT%H:%M:%SZ}", "key_observations": [{{"type": "log", "keyword": ["{pair}"]}}]}}\n'
        for kind, service, pair in rows))
    found = check(tmp_path / "tiny.duckdb", truth)
    assert (found["wrong return"]["observations"], found["exception"]["observations"]) == (1.0, 0.0)
