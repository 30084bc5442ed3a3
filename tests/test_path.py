"""The fault's path on tiny stores: walked from the entry to the cause, told in the trace, and checked by the rules
of a grounded explanation (on the graph, every component deviating, onsets from the cause outward)."""

import pytest
from test_ranking import END, START, Tiny, digest

from features.evidence import Item, Window
from features.path import Hop, fault_paths, read, ungrounded
from features.ranker import rank_window
from reasoner.rank import answer, gist, path_steps


def chain_store(path, *, caller_first=False):
    """fe -> b -> c, and fe -> d; c fails (errors, and its lines) and its callers log the failing calls; where
    `caller_first`, fe's latency rises at the window's start and c's errors only six minutes in."""
    t = Tiny(path)
    t.chain(["fe", "b", "c"])
    t.chain(["fe", "d"])
    for service in ("fe", "b", "c", "d"):
        t.place(f"{service}-0", service)
        t.series(f"{service}-0", "rrt", 2000.0, service=service, source="apm",
                 fault=30000.0 if service in ("fe", "b") else None, since=0 if caller_first else 1)
    t.series("c-0", "error_ratio", 0.001, service="c", source="apm", fault=0.6, since=6 if caller_first else 0)
    if not caller_first:
        t.log("c-0", "c", "ERROR NullPointerException in OrderRepository.find", 10, only_window=True)
        for service in ("fe", "b"):
            t.log(f"{service}-0", service, "ERROR could not place order: rpc error: code = Unavailable desc = "
                                           "connection refused", 10, only_window=True)
    return t.done()


def check(con, path):
    w = Window(START, END)
    return ungrounded(con, w, rank_window(con, w, 5), path)


@pytest.fixture
def walked(tmp_path):
    con = chain_store(tmp_path / "path.duckdb")
    yield con
    con.close()


def test_the_path_walks_from_the_entry_to_the_cause_and_the_trace_tells_it_first(walked):
    d = digest(walked)
    assert d.candidates[0].component == "c"
    hops = d.paths["c"]
    assert [h.component for h in hops] == ["fe", "b", "c"]
    assert all(h.items and h.onset for h in hops)
    trace = answer(d)["reasoning_trace"]
    entry, walk, logs = trace[:3]
    assert entry["action"] == "LogSearch(fe)"  # where users met it: the entry's own lines
    assert "'could not place order: Unavailable: connection refused'" in entry["observation"]
    assert read(walk["action"]) == ["fe", "b", "c"]
    assert walk["observation"].startswith("fe -> b -> c;")
    assert logs["action"] == "LogSearch(b)" and "could not place order" in logs["observation"]  # the callers' words
    assert len(trace) <= 5
    assert check(walked, ["fe", "b", "c"]) == []


def test_a_path_off_the_graph_is_not_grounded(walked):
    assert check(walked, ["fe", "c"]) == ["no call or placement links fe to c"]
    assert check(walked, ["b", "c"]) == []  # the part of a path where the fault showed
    assert check(walked, ["zz", "c"])[0] == "no call path leads from where the load comes in to zz"


def test_a_path_through_a_component_that_did_not_move_is_not_grounded(walked):
    assert check(walked, ["fe", "d"]) == ["d did not leave its baseline"]


def test_a_path_whose_caller_moved_before_the_cause_is_not_grounded(tmp_path):
    con = chain_store(tmp_path / "reversed.duckdb", caller_first=True)
    problems = check(con, ["fe", "b", "c"])
    assert any(p.startswith("fe moved at") and "before c" in p for p in problems), problems


def paths_to(con, cause):
    w = Window(START, END)
    return [h.component for h in fault_paths(con, w, rank_window(con, w, 5), [cause])[cause]]


def test_the_path_starts_past_a_caller_the_fault_did_not_reach(tmp_path):
    """Seen on a Train Ticket replay: the entry moved, its callee held (its calls too), the cause failed; the fault
    showed no further out than the cause, so the path is the cause alone, not a walk through a quiet component."""
    t = Tiny(tmp_path / "quiet.duckdb")
    t.chain(["fe", "b", "c"])
    for service, fault in (("fe", 30000.0), ("b", None), ("c", None)):
        t.place(f"{service}-0", service)
        t.series(f"{service}-0", "rrt", 2000.0, service=service, source="apm", fault=fault)
    t.series("c-0", "error_ratio", 0.001, service="c", source="apm", fault=0.6)
    con = t.done()
    assert paths_to(con, "c") == ["c"]
    assert check(con, ["fe", "b", "c"]) == ["b did not leave its baseline"]


def test_a_node_s_path_ends_at_the_pod_on_it_that_the_best_way_from_an_entry_reaches(tmp_path):
    """Seen on a Train Ticket replay: a node under CPU stress runs the entry's pod (slower at once) and a deeper
    pod (failing minutes later). The entry met the fault on the node itself; a walk to the deeper pod would have
    the entry move before what it waits on."""
    t = Tiny(tmp_path / "node.duckdb")
    t.chain(["fe", "b"])
    for service, since in (("fe", 0), ("b", 6)):
        t.place(f"{service}-0", service)
        t.series(f"{service}-0", "rrt", 2000.0, service=service, source="apm", fault=6000.0, since=since)
    t.series("b-0", "error_ratio", 0.001, service="b", source="apm", fault=0.6, since=6)
    t.series("node-1", "node_cpu_usage_rate", 20.0, kind="node", source="infra_node", node="node-1", fault=95.0)
    con = t.done()
    assert paths_to(con, "node-1") == ["fe-0", "node-1"]
    assert check(con, ["fe-0", "node-1"]) == []
    assert any(p.startswith("fe moved at") for p in check(con, ["fe", "b-0", "node-1"]))


def test_a_logged_error_is_quoted_as_what_failed_its_codes_and_its_two_innermost_errors():
    def line(text):
        return Item("fe-0", "log", 1.0, "", "", "log", line=text)
    assert gist(line("could not retrieve cart: rpc error: code = Internal desc = rpc error: code = Unavailable "
                     "desc = name resolver error: produced zero addresses; lookup failed on 10.0.0.2:53: no such "
                     "host")) == "could not retrieve cart: Internal, Unavailable: name resolver error: no such host"
    assert gist(line('failed to get product: rpc error: code = Unavailable desc = connection error: desc = "transport: '
                     'Error while dialing dial tcp 10.0.0.1:3550: connect: connection refused"')) == \
        "failed to get product: Unavailable: connect: connection refused"  # what went wrong, not where it dialled
    assert gist(line("code error: panic: runtime error: invalid memory address or nil pointer dereference "
                     "[signal SIGSEGV: segmentation violation]")) == \
        "code error: runtime error: invalid memory address or nil pointer dereference"
    assert gist(line('request error: code = <*> desc = <*>","severity":"warning"}')) == "request error"
    # a correlation id and its label, a stack frame: none says what failed
    assert gist(line("o.a.c.c.C.#175 TraceID: 72271ed506e6a25e751cc79c3fd371d7 SpanID: 31b68384f5c07779 "
                     "java.lang.RuntimeException: injected exception at a.B.c(B.java:12)")) == \
        "o.a.c.c.C.#175 java.lang.RuntimeException: injected exception"
    # nor the URL a request went to: two callers' lines fit in a step's twenty words, each by what went wrong; nor the
    # logger that wrote it (the step names who logged it), but for a code position (`logger#line`: where a path broke)
    assert gist(line('c.c.CancelController request failed: I/O error on request for "http://ts-user-service:8080": '
                     'Connection reset')) == "request failed: I/O error on request: Connection reset"
    assert gist(line("WARN  i.c.InsidePaymentController TraceID:  SpanID:  GCHelper: forcing full garbage collection")) \
        == "GCHelper: forcing full garbage collection"


def test_a_caller_on_the_way_names_the_metric_of_each_way_the_fault_reached_it():
    """Its errors and its latency both rose: the walk names both metrics, strongest first, within its first 20
    words (a judge looking for the latency's metric finds it beside the errors')."""
    def metric(component, key, signal, blame, text):
        return Item(component, "metric", blame, key, f"metric {key} of {component}: {text} (z 9)", signal)
    caller = Hop("fe", [metric("fe", "error", "errors", 0.9, "4 -> 56"),
                        metric("fe", "rrt", "latency", 0.5, "33k -> 257k"),
                        metric("fe", "request", "traffic", 0.95, "9k -> 5k")], None)
    cause = Hop("c", [Item("c", "trace", 0.8, "error spans", "trace errors start in c: 0% -> 30% of spans",
                           "error origin")], None)
    walk = next(s for s in path_steps([caller, cause]) if s["action"].startswith("TraceAnalysis"))
    assert walk["observation"].startswith("fe -> c; fe error 4->56, rrt 33k->257k; c ")


def test_a_reason_names_one_key_of_each_signal_before_a_second_of_any():
    """Seen on simulated phase-one pod failures: the reason named four network series of the dead pod after its
    process count, and not the responses that stopped (what the judge's key metrics hold)."""
    from reasoner.rank import reason

    keys = ["pod_processes", "pod_cpu_usage", "pod_network_receive_bytes", "pod_network_receive_packets",
            "pod_network_transmit_bytes", "pod_network_transmit_packets", "response", "error"]
    evidence = [Item("a-0", "silence", 1.0, k, f"silence {k} of a-0: 2 -> 0", "silence") for k in keys]
    said = reason("a-0", "pod failure", "pod_processes", evidence)
    assert said.split("; also ")[1].rstrip(".").split(", ") == ["pod_cpu_usage", "pod_network_receive_bytes",
                                                                "response", "error"]


def test_a_reason_names_a_second_measure_of_a_strong_signal_before_a_weak_signal():
    """Seen on the real Train Ticket day: a CPU contention's reason named the pod's memory (a tenth as strong)
    before CpuUsageRate(%), the key metric the truth lists, as strong as CpuUsage(m)."""
    from reasoner.rank import reason

    def item(kind, signal, score, key):
        return Item("b", kind, score, key, f"{key} of b", signal)

    evidence = [item("trace", "link", 0.73, "call latency"), item("metric", "cpu", 0.6, "CpuUsage(m)"),
                item("metric", "cpu", 0.6, "CpuUsageRate(%)"), item("metric", "traffic", 0.17, "PodWorkload(Ops)"),
                item("metric", "memory", 0.11, "MemoryUsage(Mi)")]
    said = reason("b", "cpu stress", "call latency", evidence)
    assert said.split("; also ")[1].rstrip(".").split(", ")[:2] == ["CpuUsage(m)", "CpuUsageRate(%)"]


def test_a_reason_whose_cause_moved_no_metric_of_its_own_names_where_it_was_felt():
    """Seen on simulated Train Ticket network delays: the delayed callee's own metrics do not move (its callers
    wait), and the reason named only the span offset the traces give, no metric of the dump (the truth's rrt)."""
    from types import SimpleNamespace

    from features.ranker import Candidate
    from reasoner.rank import reason, where_felt

    own = [Item("b", "trace", 0.9, "NetworkP90(ms)", "trace NetworkP90(ms) of b: 0.188 -> 119 ms", "link")]
    caller = Candidate("a", "service", 0.1, explained_by="b", evidence=[
        Item("a-0", "metric", 0.3, "request", "metric request of a-0: 900 -> 500 (z 5)", "traffic"),
        Item("a-0", "metric", 0.5, "rrt", "metric rrt of a-0: 107.0k -> 391.7k (z 15)", "latency")])
    felt = where_felt(SimpleNamespace(candidates=[Candidate("b", "service", 0.9, own), caller]), "b")
    assert [e.key for e in felt] == ["rrt"]  # what travels up the calls, not the traffic that fell with it
    said = reason("b", "network delay", "NetworkP90(ms)", own, felt=felt)
    assert said == "Network delay in b: NetworkP90(ms) rose from 0.188 to 119 ms; felt in a-0 as rrt rose from " \
                   "107.0k to 391.7k."
    own_metric = Item("b-0", "metric", 0.4, "rrt", "metric rrt of b-0: 1.0k -> 9.0k (z 9)", "latency")
    assert "felt" not in reason("b", "network delay", "NetworkP90(ms)", own + [own_metric], felt=felt)
