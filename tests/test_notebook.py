"""The feature notebook runs top to bottom on a tiny store and draws its pictures."""

from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "explore_features.ipynb"


def test_explore_features_notebook_runs(replay, replay_store, monkeypatch, tmp_path):
    db, _ = replay_store
    monkeypatch.setenv("RCALAB_STORE", str(db))
    monkeypatch.setenv("RCALAB_INPUT", str(replay / "input.json"))
    monkeypatch.setenv("RCALAB_UUID", "38ee3d45-82")  # pod failure of cartservice
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) == 2
    text = "".join(str(o.get("data", {}).get("text/plain", "")) + o.get("text", "") for o in outputs)
    assert "38ee3d45-82" in text and "cartservice" in text
