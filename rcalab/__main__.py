from rcalab.cli import cli

cli(prog_name="rcalab")
