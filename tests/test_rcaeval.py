"""RCAEval's case folders, written here in the layout the `rcaeval` package's readers read (its data cannot be
fetched here): they load, `rcalab cases` writes their questions, and the ranking names each case's service."""

import json

from click.testing import CliRunner

from etl import store
from etl.adapters import adapter_for
from features.cases import load_questions
from features.digest import build_digest
from rcalab.cli import cli

SERVICES = ("frontend", "cartservice", "checkoutservice")
INJECT = 1_700_000_000 + 30 * 60  # after half an hour of normal data


def case(root, service, fault, moved, wide=True, hours=0):
    """Forty minutes of metrics a 15 s apart (`<service>_<metric>` columns), recorded `hours` after the first
    case; from the inject time `moved` rises tenfold in `service`. Logs and traces around it; a `metrics.json`
    where not `wide`."""
    folder = root / "RE2-OB" / f"{service}_{fault}" / "1"
    folder.mkdir(parents=True)
    inject = INJECT + hours * 3600
    (folder / "inject_time.txt").write_text(f"{inject}\n")
    times = range(inject - 30 * 60, inject + 10 * 60, 15)
    columns = [f"{s}_{m}" for s in SERVICES for m in ("cpu", "mem", "latency-50")]
    series = {c: [[t, (10.0 if c == f"{service}_{moved}" and t >= inject else 1.0) * (1 + 0.02 * ((t // 15) % 3))]
                  for t in times] for c in columns}
    if wide:
        rows = ["time," + ",".join(columns)] + [",".join([str(t)] + [str(series[c][i][1]) for c in columns])
                                              for i, t in enumerate(times)]
        (folder / "data.csv").write_text("\n".join(rows) + "\n")
    else:
        (folder / "metrics.json").write_text(json.dumps(series))
    (folder / "logs.csv").write_text("time,container_name,message\n" + "".join(
        f"{t},{s},GET /cart 200\n" for t in times for s in SERVICES))
    spans = ["traceID,spanID,parentSpanID,serviceName,operationName,startTime,duration"]
    for i, t in enumerate(times):
        spans.append(f"t{i},a{i},,frontend,GET /cart,{t * 10**6},{20_000}")
        spans.append(f"t{i},b{i},a{i},cartservice,GetCart,{t * 10**6 + 1000},{5_000}")
    (folder / "traces.csv").write_text("\n".join(spans) + "\n")


def test_rcaeval_case_folders_load_and_their_questions_are_answered(tmp_path):
    dump = tmp_path / "rcaeval"
    case(dump, "cartservice", "cpu", "cpu")
    case(dump, "checkoutservice", "mem", "mem", wide=False, hours=3)
    assert adapter_for(dump).NAME == "rcaeval"
    runner = CliRunner()
    db, cases = tmp_path / "store.duckdb", tmp_path / "cases"
    assert runner.invoke(cli, ["etl", str(dump), "--db", str(db)]).exit_code == 0
    result = runner.invoke(cli, ["cases", str(dump), "--out", str(cases)])
    assert result.exit_code == 0, result.output
    truth = [json.loads(line) for line in (cases / "groundtruth.jsonl").read_text().splitlines()]
    assert [(r["service"], r["fault_type"], r["uuid"]) for r in truth] == [
        ("cartservice", "cpu", "rcaeval-RE2-OB-cartservice_cpu-1"),
        ("checkoutservice", "mem", "rcaeval-RE2-OB-checkoutservice_mem-1")]
    con = store.connect(db, read_only=True)
    assert con.execute("select count(*) from spans where parent_span_id is not null").fetchone()[0] > 0
    assert con.execute("select distinct metric from metric_points order by 1").fetchall() == [
        ("cpu",), ("latency-50",), ("mem",)]
    for q, row in zip(load_questions(cases / "input.json"), truth):
        assert build_digest(con, q).candidates[0].component == row["service"]
    con.close()
    answers = tmp_path / "answers.jsonl"
    result = runner.invoke(cli, ["diagnose", "--agent", "rank", "--db", str(db), "--input", str(cases / "input.json"),
                                 "--out", str(answers)])
    assert result.exit_code == 0, result.output
    assert [json.loads(line)["component"] for line in answers.read_text().splitlines()] == [r["service"] for r in truth]
