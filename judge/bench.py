"""Benchmark of the agents side by side: on a stratified sample of each set (a simulated replay of a
schedule, and each real labelled dump), `rank` and `llm` answer the same cases and are judged alike:
final, LA, TA, explainability, APL, the share of traces whose fault's path is grounded and of answers that state only what the store holds, unanswered and fallback
cases, seconds, tokens and LLM calls a case; and apart, the cases where the ranking is unsure, where a model could
decide what the ranking cannot: how many, and the share of them each agent names right, the llm agent also
deciding among the rivals there (`diagnose --decide`)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from etl import store
from etl.loader import run_etl
from features.bench import REPLAY_SCALE, Replay, cold, labelled_stores, ranking
from features.cases import load_questions, snapshot_questions
from features.digest import build_digest
from reasoner.agent import openai_chat
from reasoner.batch import run_batch, transcripts_path
from reasoner.llm import LLMConfig, client, endpoint
from reasoner.rank import answer
from reasoner.stub import StubEndpoint

from .grounding import grounding
from .report import transcript_figures
from .scoring import score

DECIDING = ("unsure", "LA_unsure", "fallback", "seconds_per_case")  # what is judged of the model deciding


def stratified(input_json: Path, truth: Path, per_type: int) -> list:
    """Up to `per_type` cases of every fault type, in the input's order."""
    types = {r["uuid"]: r["fault_type"] for r in map(json.loads, truth.read_text().splitlines())}
    taken: dict[str, int] = defaultdict(int)
    picked = []
    for q in load_questions(input_json):
        if taken[types[q.uuid]] < per_type:
            taken[types[q.uuid]] += 1
            picked.append(q)
    return picked


def unsure(db: Path, sample: list) -> set[str]:
    """The cases whose ranking is unsure (`Digest.unsure`): the first does not stand out, or a rival is close."""
    con = store.connect(db, read_only=True)
    try:
        digests = [build_digest(con, q) for q in sample]
    finally:
        con.close()
    return {d.uuid for d in digests if d.unsure}


def challenge(scored) -> dict:
    """The figures the challenge scores: final, LA, TA, APL, and explainability where the truth names key
    observations (a replay's do; real days' labels name none: None there, not 0)."""
    summary = scored.summary()
    observed = any(c.points for c in scored.cases)
    return {k: summary[k] for k in ("final", "LA", "TA", "APL")} | {
        "explainability": summary["explainability"] if observed else None}


def judged(answers: Path, truth: Path, db: Path, sample: list, folder: Path, doubtful: set[str]) -> dict:
    uuids = {q.uuid for q in sample}
    sample_truth = folder / "truth.jsonl"
    sample_truth.write_text("".join(line + "\n" for line in truth.read_text().splitlines()
                                    if json.loads(line)["uuid"] in uuids))
    scored = score(sample_truth, answers)
    summary = scored.summary()
    figures = transcript_figures(answers, {}) or {}
    hard = [c for c in scored.cases if c.uuid in doubtful]
    g = grounding(db, sample, answers)
    return {**challenge(scored), **{k: summary[k] for k in ("cases", "answered")},
            "unsure": len(hard), "LA_unsure": round(sum(c.component_ok for c in hard) / len(hard), 4) if hard else None,
            **{k: g[k] for k in ("grounded", "held")},
            **{k: figures.get(k) for k in ("fallback", "seconds_per_case", "llm_calls_per_case",
                                           "prompt_tokens_per_case", "output_tokens_per_case")}}


def ranked(db: Path, input_json: Path, truth: Path) -> dict:
    """The ranking's figures (`features.bench.ranking`) and, judged as the challenge scores them, the `rank` agent's
    answers to every case from the same digests (`challenge`)."""
    answers = []
    result = ranking(db, input_json, truth, each=lambda question, digest: answers.append(answer(digest)))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "answers.jsonl"
        path.write_text("".join(json.dumps(a) + "\n" for a in answers if a))
        scored = score(truth, path)
    return result | {"rank agent": challenge(scored)}


def run(replays: dict[str, Replay], real: list[Path], per_type: int = 2, scale: float = REPLAY_SCALE,
        progress=lambda what: None) -> dict:
    result: dict = {}
    with tempfile.TemporaryDirectory() as tmp, endpoint() as (client, model):
        tmp = Path(tmp)
        chat = openai_chat(client, model)
        for name, db, input_json, truth in labelled_stores(tmp, replays, real, scale, progress=progress):
            sample = stratified(input_json, truth, per_type)
            doubtful = unsure(db, sample)
            hard = [q for q in sample if q.uuid in doubtful]
            # (label, chat, model, cases, settings); the model deciding is judged on the unsure cases alone
            runs = [("rank", None, "rank", sample, {}), ("llm", chat, model, sample, {})]
            runs += [("llm deciding", chat, model, hard, {"decide": True})] if hard else []
            for label, by, answered_by, cases, settings in runs:
                progress(f"{label} on {len(cases)} cases of {name}")
                folder = tmp / name / label.replace(" ", "-")
                folder.mkdir(parents=True)
                answers = folder / "answers.jsonl"
                run_batch(db, cases, answers, by, model=answered_by, **settings)
                figures = judged(answers, truth, db, cases, folder, doubtful)
                result[f"{name}/{label}"] = {k: figures[k] for k in DECIDING} if settings else figures
    return result


LOAD_CASES = 16  # of a random HipsterShop schedule
AT_ONCE = 8  # `diagnose --concurrency`
LOAD_LIMIT = 15.0  # `--time-limit`, seconds a case
SLOW = 60.0  # the slow endpoint answers after this long: past any case's limit


def under_load(db: Path, input_json: Path, truth: Path) -> dict:
    """`diagnose` of a store's cases against a stand-in for a model server (`reasoner.stub`), AT_ONCE at a time:
    with one that answers at once, the wall time against the same cases one at a time (issue 47's goal: within
    1.5x of (cases / min(AT_ONCE, cores)) x a case's time); with one slower than LOAD_LIMIT, the slowest case's
    seconds from its start to its answer (within LOAD_LIMIT + 2) and the cases marked as answered by the ranking.
    Each run starts on a store never read."""
    questions = load_questions(input_json)
    reply = json.dumps({"action": "answer", "option": "1a", "fault_type": "cpu stress", "reason": "as it says"})
    out: dict = {"cases": len(questions), "at once": AT_ONCE, "cores": os.cpu_count() or 1}
    with tempfile.TemporaryDirectory() as tmp, StubEndpoint("answer", reply) as fast, \
            StubEndpoint("hang", delay=SLOW) as slow:
        def diagnosed(name: str, stub: StubEndpoint, concurrency: int, **settings) -> tuple[float, list[dict]]:
            cold(db)
            answers = Path(tmp) / f"{name}.jsonl"
            chat = openai_chat(client(LLMConfig(base_url=stub.url), stub.url), "stub")
            started = time.monotonic()
            run_batch(db, questions, answers, chat, model="stub", concurrency=concurrency, **settings)
            seconds = time.monotonic() - started
            return seconds, [json.loads(line) for line in transcripts_path(answers).read_text().splitlines()]

        alone, _ = diagnosed("alone", fast, 1)
        together, answered = diagnosed("together", fast, AT_ONCE)
        _, late = diagnosed("slow", slow, AT_ONCE, time_limit=LOAD_LIMIT)
    out["a case alone, s"] = round(alone / len(questions), 2)
    out["all, at once, s"] = round(together, 1)
    out["against (cases / min(at once, cores)) x a case alone"] = round(
        together / (alone / min(AT_ONCE, out["cores"])), 2)
    out["cases the endpoint answered at once"] = sum(t["status"] == "answered" for t in answered)
    out["time limit, s"] = LOAD_LIMIT
    out["slowest case against a slower endpoint, s"] = max(t["seconds"] for t in late)
    out["cases marked past the endpoint (fallback)"] = sum(t["status"] == "fallback" for t in late)
    return out


BEST_AGENT = 0.73  # Cloud-OpsBench's own table: its best LLM agent's A@1 (DeepSeek-V3.2), as issue 72 quotes it


def cluster(root: Path, out: Path, progress=lambda what: None) -> dict:
    """The Kubernetes family on Cloud-OpsBench's case folders under `root`, as a user runs it (etl, questions,
    diagnose --agent rank, judge --rules cloudopsbench): A@1, A@3 and the partial matches, over all and by category;
    the load's seconds a case; and the best constant answer (the commonest label) as chance."""
    from . import cloudopsbench

    out.mkdir(parents=True, exist_ok=True)
    db = out / "cluster.duckdb"
    for path in out.glob("cluster.duckdb*"):  # a store of its own, loaded afresh
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    progress("loading the case folders")
    started = time.perf_counter()
    run_etl(root, db)
    load_seconds = time.perf_counter() - started
    questions_file, answers = out / "cluster-input.json", out / "cluster-answers.jsonl"
    asked = snapshot_questions(db)
    questions_file.write_text(json.dumps(asked))
    answers.unlink(missing_ok=True)
    transcripts_path(answers).unlink(missing_ok=True)
    progress(f"answering {len(asked)} cases")
    started = time.perf_counter()
    run_batch(db, load_questions(questions_file), answers, None, model="rank")
    answer_seconds = time.perf_counter() - started
    # the cases the llm agent would ask its model about (findings tied at the top); the others it answers as rank does
    tied = sum(not json.loads(line)["clear"] for line in transcripts_path(answers).read_text().splitlines())
    judged = cloudopsbench.evaluate(root, answers)
    by_category: dict[str, dict] = {}
    for uuid, hit in judged["cases"].items():
        c = by_category.setdefault(uuid.split("/")[1], {"cases": 0, "A@1": 0, "A@3": 0})
        c["cases"] += 1
        c["A@1"] += hit["A@1"]
        c["A@3"] += hit["A@3"]
    labels = [hit["label"] for hit in judged["cases"].values()]
    commonest = max(set(labels), key=labels.count)
    return {**judged["summary"], "constant": round(labels.count(commonest) / len(labels), 4),
            "best_agent": BEST_AGENT, "load_seconds_per_case": round(load_seconds / len(labels), 3),
            "answer_seconds_per_case": round(answer_seconds / len(labels), 3), "model_asked": tied,
            "by_category": {k: {"cases": v["cases"], "A@1": round(v["A@1"] / v["cases"], 3),
                                "A@3": round(v["A@3"] / v["cases"], 3)} for k, v in sorted(by_category.items())},
            "misses": judged["misses"]}
