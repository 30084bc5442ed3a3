"""The feature notebook runs top to bottom on a tiny store and draws its pictures."""

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import nbformat
from nbclient import NotebookClient

from reasoner.llm import free_port

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
    assert len(images) == 3  # the metric, the frontend's calls to cart that vanished (an echo), the call graph
    text = "".join(str(o.get("data", {}).get("text/plain", "")) + o.get("text", "") for o in outputs)
    assert "38ee3d45-82" in text and "cartservice" in text
    assert "echo frontend: hipstershop.CartService/GetCart calls start_call cartservice" in text


def test_the_notebook_runs_in_jupyterlab_through_the_server_s_api(replay, replay_store, tmp_path):
    """As `make notebook` starts it (bound to 127.0.0.1, the store and questions preset): the server lists the
    notebook, a kernel it starts runs every code cell over its websocket, and no cell fails."""
    env = {**os.environ, "RCALAB_STORE": str(replay_store[0]), "RCALAB_INPUT": str(replay / "input.json"),
           "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"), "JUPYTER_CONFIG_DIR": str(tmp_path / "config")}
    port, token = free_port(), "rcalab-test"
    server = subprocess.Popen([sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", "--ip",
                               "127.0.0.1", f"--port={port}", f"--IdentityProvider.token={token}",
                               f"--ServerApp.root_dir={NOTEBOOK.parent}"],
                              env=env, stdout=subprocess.DEVNULL, stderr=(tmp_path / "server.log").open("w"))
    base, auth = f"http://127.0.0.1:{port}", {"Authorization": f"token {token}"}
    try:
        for _ in range(120):  # up to a minute for the server to answer
            try:
                if httpx.get(f"{base}/api/status", headers=auth, timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.5)
        else:
            log = (tmp_path / "server.log").read_text()
            raise AssertionError(f"JupyterLab did not answer in a minute: {log[-800:]}")
        listed = httpx.get(f"{base}/api/contents", headers=auth, timeout=10).json()
        assert NOTEBOOK.name in [f["name"] for f in listed["content"]]
        nb = httpx.get(f"{base}/api/contents/{NOTEBOOK.name}", headers=auth, timeout=10).json()["content"]
        session = httpx.post(f"{base}/api/sessions", headers=auth, timeout=60, json={
            "path": NOTEBOOK.name, "type": "notebook", "kernel": {"name": "python3"}}).json()
        cells = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
        outcomes = asyncio.run(run_cells(f"ws://127.0.0.1:{port}/api/kernels/{session['kernel']['id']}/channels"
                                         f"?token={token}", cells))
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert [status for status, _ in outcomes] == ["ok"] * len(cells), outcomes
    assert any("image/png" in kinds for _, kinds in outcomes)


async def run_cells(url: str, cells: list[str]) -> list[tuple[str, set[str]]]:
    """Each cell executed on a kernel over the Jupyter messaging protocol: its reply's status and the kinds of
    output it displayed."""
    from tornado.websocket import websocket_connect

    ws = await websocket_connect(url)
    session, outcomes = uuid.uuid4().hex, []
    for code in cells:
        msg_id = uuid.uuid4().hex
        ws.write_message(json.dumps({
            "header": {"msg_id": msg_id, "msg_type": "execute_request", "session": session, "username": "test",
                       "version": "5.3"},
            "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
            "content": {"code": code, "silent": False, "store_history": True, "user_expressions": {},
                        "allow_stdin": False, "stop_on_error": True}}))
        kinds: set[str] = set()
        while True:
            msg = json.loads(await asyncio.wait_for(ws.read_message(), timeout=300))
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            if msg["msg_type"] in ("display_data", "execute_result"):
                kinds |= set(msg["content"]["data"])
            if msg["msg_type"] == "execute_reply":
                outcomes.append((msg["content"]["status"], kinds))
                break
    ws.close()
    return outcomes


def test_the_day_notebook_draws_the_timeline_and_links_every_incident_to_its_page(replay, replay_store, monkeypatch,
                                                                                  tmp_path):
    monkeypatch.setenv("RCALAB_STORE", str(replay_store[0]))
    monkeypatch.setenv("RCALAB_INPUT", str(replay / "input.json"))
    monkeypatch.setenv("RCALAB_PAGES", str(tmp_path / "pages"))
    nb = nbformat.read(NOTEBOOK.with_name("day.ipynb"), as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert len([o for o in outputs if "image/png" in o.get("data", {})]) == 1
    table = next(o["data"]["text/html"] for o in outputs if "text/html" in o.get("data", {}))
    pages = sorted((tmp_path / "pages").glob("case-*.html"))
    assert pages and all(f"href='pages/{p.name}'" in table for p in pages)  # beside the notebook, as rendered
