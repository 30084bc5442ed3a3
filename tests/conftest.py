import shutil
from pathlib import Path

import pytest

from features.refresh import nightly

from testbed.schedule import load_schedule, random_cases
from testbed.simulate import simulate
from testbed.topology import Topology

def copy_store(src: Path, dst: Path) -> Path:
    """A copy of a store: its catalog and its shards folder."""
    shutil.copy(src, dst)
    shutil.copytree(f"{src}.shards", f"{dst}.shards")
    return dst


SHARED = Path(__file__).resolve().parents[2] / "shared"
PHASE_ONE = SHARED / "challenge2025" / "groundtruth-phaseone.jsonl"


@pytest.fixture(scope="session")
def replay(tmp_path_factory):
    """The first five phase-one cases, simulated at a tiny scale."""
    out = tmp_path_factory.mktemp("replay")
    topo = Topology.build(0)
    simulate(out, load_schedule(PHASE_ONE, topo, limit=5), topo, scale=0.005, seed=0)
    return out


@pytest.fixture(scope="session")
def every_fault(tmp_path_factory):
    """One random case of each of the 18 fault types, over one simulated day."""
    out = tmp_path_factory.mktemp("every_fault")
    topo = Topology.build(3)
    cases = random_cases(18, topo, seed=3)
    simulate(out, cases, topo, scale=0.02, seed=3)
    return out, cases


@pytest.fixture(scope="session")
def replay_store(replay, tmp_path_factory):
    """The replay loaded into a store, and the ETL's report."""
    db = tmp_path_factory.mktemp("store") / "store.duckdb"
    return db, nightly(replay, db)


@pytest.fixture(scope="session")
def every_fault_store(every_fault, tmp_path_factory):
    """The every-fault dump loaded into a store."""
    dump, cases = every_fault
    db = tmp_path_factory.mktemp("every_fault_store") / "store.duckdb"
    nightly(dump, db)
    return db, dump / "groundtruth.jsonl"
