"""The notebooks of `notebooks/`, executed on a store and rendered as self-contained HTML beside a report, for a
person who never starts Jupyter: nbclient runs them with the store and questions preset, nbconvert's basic
template renders them (pictures inline, no script or style from the network)."""

from __future__ import annotations

import html
import os
import tempfile
from pathlib import Path

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
RENDERED = ("explore_features.ipynb", "day.ipynb")
STYLE = ("body{font:14px sans-serif;margin:2em;max-width:1200px}pre{white-space:pre-wrap;background:#f6f6f6;"
         "padding:6px}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px}img{max-width:100%}")


def render_notebooks(db: Path, input_json: Path, folder: Path) -> dict[str, str]:
    """Each notebook executed on `db` (its cases from `input_json`) and written as `<folder>/<name>.html`; returns
    name -> what happened: the page's name, or why it could not be run (the rest of the report stands)."""
    import nbformat
    from jupyter_client import KernelManager
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError
    from nbconvert import HTMLExporter

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    done: dict[str, str] = {}
    env = {**os.environ, "RCALAB_STORE": str(Path(db).resolve()), "RCALAB_INPUT": str(Path(input_json).resolve()),
           "RCALAB_PAGES": "day-pages"}  # the kernel's own environment; this process's stays as it was
    for name in RENDERED:
        nb = nbformat.read(NOTEBOOKS / name, as_version=4)
        try:
            with tempfile.TemporaryDirectory() as sockets:  # the kernel over local sockets, not TCP
                kernel = KernelManager(kernel_name="python3", transport="ipc", ip=str(Path(sockets) / "kernel"))
                try:
                    NotebookClient(nb, km=kernel, timeout=900,
                                   resources={"metadata": {"path": str(folder)}}).execute(env=env)
                finally:
                    if kernel.has_kernel:
                        kernel.shutdown_kernel(now=True)
        except CellExecutionError as e:
            done[name] = f"failed: {str(e).strip().splitlines()[-1][:200]}"
            continue
        body, _ = HTMLExporter(template_name="basic").from_notebook_node(nb)
        page = folder / name.replace(".ipynb", ".html")
        page.write_text(f"<!doctype html><meta charset='utf-8'><title>{html.escape(name)}</title>"
                        f"<style>{STYLE}</style>{body}")
        done[name] = page.name
    return done
