"""RCAEval's metric baselines beside the ranking, on the same windows of the same stores: BARO (robust z of every
series, its largest in the window against the time before) and n-sigma (the same with the mean and standard
deviation), as the `rcaeval` package implements them (the `baselines` extra), and chance (a random order of the
same candidates). Each is fed as RCAEval's cases are: a frame of a row a minute and a column a series,
`<service>_<metric>` (a pod's series under its service, a node's under the node), from the hour before the window
to its end, with the window's start as the inject time. A method's ranked columns give its ranked services.

On Python 3.11 the `RCAEval.e2e` package imports methods that need torch and causal-learn, which RCAEval's
dependency pins do not give without its heavy `default` extra; BARO and multi-source n-sigma live in
`RCAEval/e2e/baro.py`, which needs only pandas and scikit-learn, so that file is loaded on its own.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
from functools import cache

from .cases import Question
from .evidence import BASELINE

K = 5  # Avg@5: the mean of AC@1 .. AC@5


@cache
def methods() -> dict:
    """RCAEval's BARO and n-sigma by name, or none where the `baselines` extra is not installed."""
    try:
        spec = importlib.util.find_spec("RCAEval")
    except ImportError:
        return {}
    if spec is None or not spec.submodule_search_locations:
        return {}
    path = f"{list(spec.submodule_search_locations)[0]}/e2e/baro.py"
    module_spec = importlib.util.spec_from_file_location("rcaeval_baro", path)
    module = importlib.util.module_from_spec(module_spec)
    try:
        module_spec.loader.exec_module(module)
    except ImportError:  # pandas or scikit-learn missing
        return {}

    def nsigma(frame, inject_time):
        # RCAEval's n-sigma for one source: its multi-source form on the metrics alone, at a minute's resolution
        return module.mmnsigma({"metric": frame.loc[frame.index.repeat(15)].reset_index(drop=True),
                                "logts": frame[["time"]]}, inject_time=inject_time)

    return {"BARO": lambda frame, inject_time: module.baro(frame, inject_time=inject_time), "n-sigma": nsigma}


def frame(con, q: Question):
    """The case's metrics as RCAEval's frame, and each column's unit (a service, or a node)."""
    df = con.execute("""
        select epoch(date_trunc('minute', ts)) as time, coalesce(service, component) as unit, metric,
               avg(value) as value
        from metric_points where ts >= ? and ts <= ? group by all""", [q.start - BASELINE, q.end]).df()
    if df.empty:
        return None, {}
    df["column"] = df["unit"] + "_" + df["metric"]
    wide = df.pivot_table(index="time", columns="column", values="value").reset_index()
    wide.columns.name = None
    units = dict(zip(df["column"], df["unit"]))
    return wide.ffill().fillna(0.0), units


def ranked_units(columns: list[str], units: dict[str, str]) -> list[str]:
    out: list[str] = []
    for c in columns:
        if c in units and units[c] not in out:
            out.append(units[c])
    return out


def inject_time(q: Question) -> float:
    return q.start.replace(second=0, microsecond=0, tzinfo=dt.timezone.utc).timestamp()
