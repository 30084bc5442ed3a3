PYTHON ?= python3
VENV ?= .venv
BIN = $(VENV)/bin
DEMO ?= demo

.PHONY: setup browser test demo notebook bench docs docs-pages clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,semantic]'
	touch $@

# The page tests open the case pages in Debian's chromium; the machines run as root with Debian's packages reachable.
browser:
	@command -v chromium >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium)

test: setup browser
	$(BIN)/python -m pytest

demo: setup
	$(BIN)/rcalab simulate $(DEMO)/dump --schedule data/demo-schedule.jsonl --scale 0.05 --seed 7
	$(BIN)/rcalab etl $(DEMO)/dump --db $(DEMO)/store.duckdb
	$(BIN)/rcalab diagnose --agent rank --db $(DEMO)/store.duckdb --input $(DEMO)/dump/input.json --out $(DEMO)/rank.jsonl
	-$(BIN)/rcalab diagnose --agent llm --db $(DEMO)/store.duckdb --input $(DEMO)/dump/input.json --out $(DEMO)/llm.jsonl
	$(BIN)/rcalab judge --truth $(DEMO)/dump/groundtruth.jsonl --answers $(DEMO)/rank.jsonl --answers $(DEMO)/llm.jsonl \
		--report $(DEMO)/report --db $(DEMO)/store.duckdb --input $(DEMO)/dump/input.json
	$(BIN)/rcalab detect --db $(DEMO)/store.duckdb --given $(DEMO)/dump/input.json --out $(DEMO)/detected.json

# JupyterLab on notebooks/, bound to this machine, with the demo's store and questions preset; it prints the URL.
notebook: setup
	@test -f $(DEMO)/store.duckdb || (echo "no store at $(DEMO)/store.duckdb: run 'make demo' first" && exit 1)
	$(BIN)/pip install --quiet -e '.[notebook]'
	RCALAB_STORE=$(abspath $(DEMO))/store.duckdb RCALAB_INPUT=$(abspath $(DEMO))/dump/input.json \
		$(BIN)/jupyter lab --no-browser --allow-root --ip 127.0.0.1 --ServerApp.root_dir=notebooks

bench: setup
	$(BIN)/pip install --quiet -e '.[baselines]'
	$(BIN)/rcalab bench testbed --out bench/results
	$(BIN)/rcalab bench etl --out bench/results
	$(BIN)/rcalab bench scale --out bench/results
	$(BIN)/rcalab bench store --out bench/results
	$(BIN)/rcalab bench wide --out bench/results
	$(BIN)/rcalab bench load --out bench/results
	$(BIN)/rcalab bench rank --workers 2 --out bench/results
	$(BIN)/rcalab bench systems --random 10 --seed 1 --workers 2 --out bench/results
	$(BIN)/rcalab bench detect --out bench/results
	$(BIN)/rcalab bench diagnose --out bench/results

# The reference pages generated from the code (docs/cli.md, docs/store.md); a test fails when they are stale.
docs-pages: setup
	$(BIN)/cog -r docs/cli.md docs/store.md

# The docs as a site (site/), with MkDocs.
docs: setup
	$(BIN)/pip install --quiet -e '.[docs]'
	$(BIN)/mkdocs build --strict

clean:
	rm -rf $(VENV) $(DEMO) bench/results site
