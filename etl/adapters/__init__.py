"""Dump formats. Each adapter finds a dump's input files and gives, per file, a DuckDB query
that returns the file's rows in the canonical columns (see `etl.store`)."""

from __future__ import annotations

from pathlib import Path

from common.errors import DumpError

from . import challenge2025, cloudopsbench, kubernetes, nezha, otlp, rcaeval
from .base import InputFile, Query, ident

__all__ = ["ADAPTERS", "TABLES", "InputFile", "Query", "adapter_for", "ident", "kubernetes"]

ADAPTERS = {"challenge2025": challenge2025, "nezha": nezha, "otlp": otlp, "rcaeval": rcaeval,
            "cloudopsbench": cloudopsbench}
TABLES = {"metric": ("metric_points",), "log": ("log_lines",), "trace": ("spans",), "calls": ("declared_calls",),
          "k8s": ("k8s_objects", "k8s_events", "k8s_logs", "declared_calls"), kubernetes.KIND: ("k8s_objects", "k8s_events")}
# the tables a file of each kind fills; a cluster's exports beside any dump are read by `kubernetes` (its KIND)


def adapter_for(root: Path, fmt: str = "auto"):
    """The adapter named by `fmt`, or the one whose layout `root` has."""
    if fmt != "auto":
        if fmt not in ADAPTERS:
            raise DumpError(f"unknown format '{fmt}' (known: {', '.join(ADAPTERS)})")
        return ADAPTERS[fmt]
    for adapter in ADAPTERS.values():
        if adapter.detect(root):
            return adapter
    raise DumpError(f"{root}: no known dump layout (looked for {', '.join(ADAPTERS)}); pass --format")
