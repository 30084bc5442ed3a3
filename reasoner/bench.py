"""Benchmark of digest and diagnosis: ranking quality and digest time on every case, and the model's
tokens, tool calls and time on a stratified sample, for a simulated replay of every fault type and
for the real Train Ticket day."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from etl import store
from etl.cases import write_cases
from etl.loader import run_etl
from features.bench import ranking
from features.cases import load_questions
from judge.report import transcript_figures
from judge.scoring import score

from .agent import openai_chat
from .batch import run_batch
from .llm import endpoint


def _stratified(input_json: Path, truth: Path, n: int) -> list:
    """Up to `n` cases, one per fault type in turn."""
    types = {json.loads(line)["uuid"]: json.loads(line)["fault_type"] for line in truth.read_text().splitlines()}
    picked, seen = [], set()
    for q in load_questions(input_json):
        if types[q.uuid] not in seen and len(picked) < n:
            seen.add(types[q.uuid])
            picked.append(q)
    return picked


def _diagnose(db: Path, input_json: Path, truth: Path, n: int, folder: Path) -> dict:
    answers = folder / "answers.jsonl"
    with endpoint() as (client, model):
        run_batch(db, _stratified(input_json, truth, n), answers, openai_chat(client, model), model=model)
    sample_truth = folder / "truth.jsonl"
    uuids = {json.loads(line)["uuid"] for line in answers.read_text().splitlines()} if answers.exists() else set()
    sample_truth.write_text("".join(line + "\n" for line in truth.read_text().splitlines()
                                    if json.loads(line)["uuid"] in uuids))
    summary = score(sample_truth, answers).summary() if uuids else {}
    figures = transcript_figures(answers, {}) or {}
    figures.pop("transcripts", None)
    return {"diagnosed": n, "answered": len(uuids), "LA": summary.get("LA"), "final": summary.get("final"),
            **{k: v for k, v in figures.items() if not k.startswith("AC@")}}


def _overall(figures: dict) -> dict:
    return {k: v for k, v in figures.items() if k != "per_type"}


def run(sample: int = 6, trainticket: Path | None = None, trainticket_sample: int = 3, seed: int = 11) -> dict:
    result: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        dump, db = tmp / "sim", tmp / "sim.duckdb"
        subprocess.run([sys.executable, "-m", "rcalab", "simulate", str(dump), "--cases", "18", "--scale", "0.02",
                        "--seed", str(seed)], check=True, stdout=subprocess.DEVNULL)
        run_etl(dump, db)
        result["simulated"] = {**_overall(ranking(db, dump / "input.json", dump / "groundtruth.jsonl")),
                               **_diagnose(db, dump / "input.json", dump / "groundtruth.jsonl", sample, tmp / "a")}
        if trainticket and Path(trainticket).is_dir():
            cases, tt_db = tmp / "tt-cases", tmp / "tt.duckdb"
            write_cases(trainticket, cases)
            run_etl(trainticket, tt_db)
            result["trainticket"] = {
                **_overall(ranking(tt_db, cases / "input.json", cases / "groundtruth.jsonl")),
                **_diagnose(tt_db, cases / "input.json", cases / "groundtruth.jsonl", trainticket_sample, tmp / "b")}
    return result
