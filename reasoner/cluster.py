"""Answers about a frozen cluster's state (a snapshot's question): the Kubernetes family's findings, the first as
the answer, three in the benchmark's form (`top_3_predictions`: fault_taxonomy, fault_object, root_cause)."""

from __future__ import annotations

import time

from features.cases import Question
from features.evidence.kubernetes import findings

from .agent import Outcome


def snapshot_answer(con, question: Question) -> Outcome:
    """The answer the cluster's state gives, no model: the state's words are the evidence, quoted."""
    started = time.monotonic()
    found = findings(con, question.snapshot)
    error = None if found else "no finding: every workload, pod, service and node of the snapshot looks as it should"
    answer = None
    if found:
        top = found[0]
        answer = {"uuid": question.uuid, "component": top.component.split("/", 1)[1],
                  "reason": f"{top.root_cause}: {top.evidence[0][:160]!r}",
                  "reasoning_trace": [{"step": i + 1, "action": f"read the state of {f.component}",
                                       "observation": f"{f.root_cause}: " + "; ".join(repr(e[:160]) for e in f.evidence)}
                                      for i, f in enumerate(found[:3])],
                  "top_3_predictions": [{"fault_taxonomy": f.taxonomy, "fault_object": f.component,
                                         "root_cause": f.root_cause} for f in found[:3]]}
    seconds = round(time.monotonic() - started, 3)
    return Outcome(question.uuid, answer, error, {
        "uuid": question.uuid, "status": "answered" if answer else "failed", "error": error, "model": "rank",
        "messages": [], "calls": [], "tool_calls": 0, "tokens": {"prompt_tokens": 0, "completion_tokens": 0},
        "seconds": seconds, "digest_seconds": seconds, "candidates": [f.component for f in found],
        "confidence": None, "clear": len(found) < 2 or found[0].weight > found[1].weight, "features_missing": [],
        "skipped": []})
