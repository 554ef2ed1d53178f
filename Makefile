# seatwright: the lab, the tests and the checks. Every target uses the pinned venv (.venv).
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
VENV := .venv/bin
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export PATH := $(CURDIR)/.venv/bin:/usr/bin:$(PATH)
# Debian's docker client (scripts/bootstrap installs it) comes before any other on PATH.
STAMP := $(shell date -u +%Y%m%dT%H%M%SZ)
RUN_DIR := evidence/runs/$(STAMP)

.PHONY: help setup aiperf lab lab-up lab-down unit integration lint molecule test

help:
	@echo "make lab       set up, bring the two-node lab up and run site.yml -l gpu_nodes on it"
	@echo "make test      unit, lint, lab integration tests and molecule test (what CI runs)"
	@echo "make lab-down  remove the lab containers and network"

setup:
	bash scripts/bootstrap

lab-up: setup
	molecule create
	molecule prepare --force

lab: lab-up
	@mkdir -p $(RUN_DIR)
	ANSIBLE_LOG_PATH=$(RUN_DIR)/site.log $(VENV)/ansible-playbook -i inventory/lab site.yml -l gpu_nodes
	@echo "site.yml output: $(RUN_DIR)/site.log; facts cached in .cache/facts/; node state under /var/lib/seatwright on node-a and node-b"

lab-down:
	molecule destroy

unit:
	$(VENV)/python -m pytest tests/unit -q

# AIPerf, the benchmark's load generator, in its own cached venv (~/.cache/seatwright/aiperf-<hash>).
aiperf:
	$(VENV)/python scripts/aiperf-venv

# Weight staging's lab checks on their own two containers (ckpt-a, ckpt-b), removed afterwards;
# the benchmark driven by AIPerf against the test seat (tests/bench_server.py).
integration: aiperf
	$(VENV)/python -m pytest tests/integration -q

lint:
	$(VENV)/yamllint --strict .
	$(VENV)/ansible-lint
	$(VENV)/python tools/render_rules_table.py --check
	$(VENV)/python tools/render_role_vars.py --check

molecule:
	molecule test

test: unit lint integration molecule
