"""The reference pages generated from the code (docs/cli.md from every command's --help, docs/store.md from a new
store's tables), with cog: `cog -r docs/cli.md docs/store.md` rewrites them, `cog --check` fails when one is stale."""

from __future__ import annotations

import tempfile
from pathlib import Path

import click


def _commands(group: click.Group, prefix: str) -> list[tuple[str, click.Command]]:
    found = []
    for name in sorted(group.commands):
        command = group.commands[name]
        found.append((f"{prefix} {name}", command))
        if isinstance(command, click.Group):
            found += _commands(command, f"{prefix} {name}")
    return found


def cli_reference() -> str:
    """Every command's --help, in a block of its own under its name."""
    from click.testing import CliRunner

    from rcalab.cli import cli

    parts = []
    for name, _ in [("rcalab", cli)] + _commands(cli, "rcalab"):
        result = CliRunner().invoke(cli, [*name.split()[1:], "--help"], terminal_width=100, prog_name="rcalab")
        parts.append(f"## {name}\n\n```\n{result.output.rstrip()}\n```\n")
    return "\n" + "\n".join(parts)


def store_reference() -> str:
    """Every table of a new store: what it holds, its columns and their types."""
    from etl.store import connect, tables

    with tempfile.TemporaryDirectory() as tmp:
        con = connect(Path(tmp) / "store.duckdb")
        rows = tables(con)
        con.close()
    return "\n" + "\n".join(f"## {name}\n\n{holds}\n\n" + "\n".join(f"- `{c}`" for c in columns.split(", ")) + "\n"
                            for name, holds, columns in rows)
