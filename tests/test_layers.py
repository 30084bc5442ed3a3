"""The house is read one way: a stage imports only the ground floor (`common`: the errors, the tasks runner) and the
stages below it; the ground floor imports none of them."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STAGES = ["etl", "features", "reasoner", "judge"]  # each above the one before it
GROUND = {"common.errors", "common.tasks"}
BELOW = {stage: {*GROUND, *STAGES[:i]} for i, stage in enumerate(STAGES)}
BELOW["testbed"] = {*GROUND, "etl", "features"}  # beside the stages: its benchmarks load and rank
BELOW["common"] = set()


def imports(package: str) -> list[tuple[str, str]]:
    """(file, module) for every absolute import of one of our packages outside `package`."""
    found = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            found += [(str(path.relative_to(ROOT)), m) for m in modules
                      if m.split(".")[0] in [*STAGES, "testbed", "rcalab", "common"] and m.split(".")[0] != package]
    return found


@pytest.mark.parametrize("package", ["common", *STAGES, "testbed"])
def test_a_stage_imports_only_what_lies_below_it(package):
    allowed = BELOW[package]
    upward = [(path, m) for path, m in imports(package) if not any(m == a or m.startswith(f"{a}.") for a in allowed)]
    assert not upward, f"{package} imports from above it: {upward}"
