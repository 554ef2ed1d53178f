# seatwright: the lab, the tests and the checks. Every target uses the pinned venv (.venv).
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
VENV := .venv/bin
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export PATH := $(CURDIR)/.venv/bin:/usr/bin:$(PATH)
# Debian's docker client (scripts/bootstrap installs it) comes before any other on PATH.
STAMP := $(shell date -u +%Y%m%dT%H%M%SZ)
RUN_DIR := evidence/runs/$(STAMP)

.PHONY: help setup aiperf router-venvs lab lab-up lab-seats lab-seat-test lab-keywatch lab-promote-test lab-promote-test-smg lab-drain-test lab-refused monitoring-test wsl2-node-test lab-down fleet-lab fleet-test fleet-down images unit integration lint docs collection molecule test

help:
	@echo "make lab       set up, bring the two-node lab up and run site.yml -l gpu_nodes on it"
	@echo "make test      unit, lint, lab integration tests and molecule test (what CI runs)"
	@echo "make lab-down  remove the lab containers and network"
	@echo "make fleet-lab bring the six-node fleet lab up and converge it (fleet-test, fleet-down)"
	@echo "make images    build the real CUDA images on lab node-a, one at a time (not part of make test)"

setup:
	bash scripts/bootstrap

lab-up: setup
	@# After a reboot molecule still says the nodes exist though dockerd lost them: forget that first.
	@docker inspect node-a node-b >/dev/null 2>&1 || molecule reset >/dev/null
	molecule create
	molecule prepare --force

# The whole lab job: prepare the nodes (site.yml -l gpu_nodes: node base, driver checks, fabric,
# NCCL env, power caps, the lab engine image built on node-a and streamed to node-b), make the lab
# checkpoints and stage them with their parity manifests, bring the two-node seat up (TP2 across
# node-a and node-b; it answers and stays up), then the lab seat end to end (SmolLM2 on node-a:
# bring-up, qualification, the 1/4/8/16 benchmark, record, report and promotion decision), which
# the router on node-a (site.yml) puts behind `production`. Then a candidate (lab-allcores) takes
# the same path and promote.yml moves the alias onto it or records why not; where the alias
# stands ends the output.
lab: lab-up aiperf router-venvs
	@mkdir -p $(RUN_DIR)
	ANSIBLE_LOG_PATH=$(RUN_DIR)/site.log $(VENV)/ansible-playbook -i inventory/lab site.yml -l gpu_nodes
	@echo "site.yml output: $(RUN_DIR)/site.log; facts cached in .cache/facts/; node state under /var/lib/seatwright on node-a and node-b"
	$(MAKE) --no-print-directory lab-seats RUN_DIR=$(RUN_DIR)

# The lab's checkpoints, staged, and its two seats (needs the lab up and prepared: make lab).
lab-seats:
	@mkdir -p $(RUN_DIR)
	bash scripts/lab-models >$(RUN_DIR)/lab-models.json
	for model in tiny-llama smollm2-135m-instruct; do \
	  $(VENV)/ansible-playbook -i inventory/lab playbooks/weights.yml -e @lab/weights/$$model.yml; done
	ANSIBLE_LOG_PATH=$(RUN_DIR)/seat-lab-tp2.log $(VENV)/ansible-playbook -i inventory/lab playbooks/seat.yml -e seat=lab-tp2 -e seat_measure=false
	ANSIBLE_LOG_PATH=$(RUN_DIR)/seat-lab.log $(VENV)/ansible-playbook -i inventory/lab playbooks/seat.yml -e seat=lab
	ANSIBLE_LOG_PATH=$(RUN_DIR)/seat-lab-allcores.log $(VENV)/ansible-playbook -i inventory/lab playbooks/seat.yml \
	  -e seat=lab-allcores
	ANSIBLE_LOG_PATH=$(RUN_DIR)/promote.log $(VENV)/ansible-playbook -i inventory/lab playbooks/promote.yml \
	  -e seat=lab-allcores -e alias=production -e promote_hold_s=30 -e promote_refusal_fails=false
	@echo "this run's logs: $(RUN_DIR)/; the lab seat's evidence: $$(ls -d $(CURDIR)/evidence/lab/*/ | tail -1)"
	@$(VENV)/python tools/lab-alias evidence lab-allcores
	@echo "Prometheus (both lab seats, both nodes, the router; alerts and the dashboards' queries): http://$$($(VENV)/python -c \
	  'import yaml; print(yaml.safe_load(open("inventory/lab/group_vars/all/monitoring.yml"))["monitoring_server_listen"])')"

# Issue 23's check on the lab made by make lab: the lab seat's qualification and benchmark under
# tools/seatwright-keywatch (/proc/*/cmdline every 0.5 s, the -vvv log, the evidence folder).
lab-keywatch:
	SEATWRIGHT_KEYWATCH=1 $(VENV)/python -m pytest tests/integration/test_keys_lab.py -v -s

# The seat lifecycle's lab checks (creates and removes the lab; run under the lab lock).
lab-seat-test:
	$(VENV)/python -m pytest tests/molecule/test_seat_lifecycle.py -v

# Issue 26's lab checks on what make lab left: promote.yml under AIPerf load through the alias, a
# forced rollback and --check (tests/integration/test_promote_lab.py; under the lab lock).
lab-promote-test:
	$(FLEET_LOCK) env SEATWRIGHT_LAB_PROMOTE=1 $(VENV)/python -m pytest tests/integration/test_promote_lab.py -v

# The same checks through SGLang's model gateway (lab/router/smg.yml: smg on node-b, LiteLLM left on
# node-a): installs it, relaunches both seats to lead their served names with the alias smg routes by,
# then runs the tests through it. Needs what make lab left.
SMG_LAB := -i inventory/lab -e @lab/router/smg.yml
lab-promote-test-smg:
	$(FLEET_LOCK) $(VENV)/ansible-playbook $(SMG_LAB) playbooks/router.yml
	$(FLEET_LOCK) $(VENV)/ansible-playbook $(SMG_LAB) playbooks/seat.yml -e seat=lab -e seat_measure=false
	$(FLEET_LOCK) $(VENV)/ansible-playbook $(SMG_LAB) playbooks/seat.yml -e seat=lab-allcores \
	  -e seat_alias=production -e seat_measure=false
	$(FLEET_LOCK) env SEATWRIGHT_LAB_PROMOTE=1 SEATWRIGHT_LAB_ROUTER=smg $(VENV)/python -m pytest \
	  tests/integration/test_promote_lab.py -v

# Issue 52's lab checks on what make lab left: a simulated driver change on node-a
# (lab/drain/driver-change.yml) refused naming the serving seats, --check listing the drain, then with
# seatwright_drain=true the lab seat drained and brought back with 0 failed requests through the router
# while lab-allcores serves production from node-b, and a second converge changing nothing
# (tests/integration/test_drain_lab.py; results in bench/results/drain/; under the lab lock).
lab-drain-test:
	$(FLEET_LOCK) env SEATWRIGHT_LAB_DRAIN=1 $(VENV)/python -m pytest tests/integration/test_drain_lab.py -v

# Issue 26's other outcome, on what make lab left: the lab-seqs4 candidate (a batch of at most 4) is
# brought up, qualified, benchmarked and decided against the lab seat, then promote.yml refuses to move
# production onto it and the alias stays where it was. Not in make lab, which must stay under 45 minutes.
lab-refused:
	@mkdir -p $(RUN_DIR)
	$(FLEET_LOCK) env ANSIBLE_LOG_PATH=$(RUN_DIR)/seat-lab-seqs4.log $(VENV)/ansible-playbook -i inventory/lab \
	  playbooks/seat.yml -e seat=lab-seqs4
	$(FLEET_LOCK) env ANSIBLE_LOG_PATH=$(RUN_DIR)/promote-lab-seqs4.log $(VENV)/ansible-playbook -i inventory/lab \
	  playbooks/promote.yml -e seat=lab-seqs4 -e alias=production -e promote_refusal_fails=false
	$(VENV)/python tools/lab-alias evidence lab-seqs4 --expect refused

# Issue 51's role check, not on the lab: playbooks/monitoring.yml converged on a container of the lab
# image of its own (Prometheus and the node exporter from Debian's packages, a seat target brought up,
# its alias moved, torn down), re-run and --check changing nothing (~4 min; needs Docker and the lab image).
monitoring-test:
	SEATWRIGHT_MONITORING_CONTAINER=1 $(VENV)/python -m pytest tests/integration/test_monitoring_role.py -v

# Issue 53's WSL2 node on a lab node of its own (seatwright-wsl2-node-test, not node-a/node-b, no lab
# lock): declared WSL2 by the labelled test input, playbooks/nodes.yml converged, re-run and --check
# changing nothing, then a field seat planned on it with the quoted device request (~4 min).
wsl2-node-test:
	SEATWRIGHT_WSL2_NODE=1 $(VENV)/python -m pytest tests/integration/test_wsl2_lab_node.py -v -s

lab-down:
	molecule destroy

# The fleet lab (molecule/fleet): six light nodes, fleet-1 .. fleet-6 on the network fleetfabric,
# with no engine and no seat, for what grows with the fleet (converge, facts, preflight, staging).
# Not part of make test; each target takes the lab lock, as the two-node lab's runs do. -o: the
# command runs without the lock's descriptor, so a daemon it starts does not hold the lock after it.
FLEET_LOCK := flock -o /tmp/seatwright-lab.lock
fleet-lab: setup
	@docker inspect fleet-1 >/dev/null 2>&1 || molecule reset -s fleet >/dev/null
	$(FLEET_LOCK) molecule create -s fleet
	$(FLEET_LOCK) molecule converge -s fleet
	@echo "fleet lab up: fleet-1 .. fleet-6 at 172.30.96.21-26 on fleetfabric (inventory/fleet);"
	@echo "facts cached in .cache/facts/; node state under /var/lib/seatwright on each node; make fleet-test checks it"

fleet-test:
	$(VENV)/python -m pytest tests/integration/fleet -v

# A removed node's cached facts would stand in for the next fleet's until gathered again.
fleet-down:
	$(FLEET_LOCK) molecule destroy -s fleet
	rm -f .cache/facts/*fleet-[1-6]

# The real CUDA engine images (images/vllm-sm120.yml, images/sglang-sm120.yml), built on lab node-a one
# at a time through playbooks/images.yml: each from a cold wheelhouse and again from a warm one, its facts
# read, streamed to node-b, both nodes pruned before the next. Size, build times, distribution time and
# peak disk go to bench/results/images/<name>.json. Needs the lab up (make lab-up) and tens of GB free.
IMAGES := vllm-sm120 sglang-sm120
images: lab-up
	@for name in $(IMAGES); do \
	  $(VENV)/ansible-playbook -i inventory/lab playbooks/images.yml -e engine_image_name=$$name --syntax-check >/dev/null; \
	  $(VENV)/python scripts/images-record $$name --out bench/results/images $(IMAGES_RECORD_ARGS); \
	done

# One pytest worker per core: the unit tests keep no shared state and bind port 0. They include the
# alert rules' `promtool test rules` suite and the dashboards' queries against a Prometheus on
# loopback (tests/unit/plugins/module_utils/monitoring/test_monitoring_{rules,dashboards}.py), both
# with Debian's prometheus package, which scripts/bootstrap installs.
unit:
	$(VENV)/python -m pytest tests/unit -q -n auto

# AIPerf, the benchmark's load generator, in its own cached venv (~/.cache/seatwright/aiperf-<hash>).
aiperf:
	$(VENV)/python scripts/aiperf-venv

# The two pinned routers (LiteLLM proxy, smg) in cached venvs, exactly what the router role installs,
# for tests/integration/test_promote_real.py: as root under /var/cache/seatwright/router-venvs/, where
# the router's own user reaches them from a checkout in any folder (router/deploy.py router_venv_dir).
router-venvs:
	$(VENV)/python scripts/router-venvs

# Weight staging's lab checks on their own two containers (ckpt-a, ckpt-b), removed afterwards;
# the benchmark driven by AIPerf against the test seat (tests/bench_server.py); promote.yml with the
# real router role and both real routers on this machine (needs nginx: scripts/bootstrap).
integration: aiperf router-venvs
	$(VENV)/python -m pytest tests/integration -q

lint:
	$(VENV)/ruff check .
	$(VENV)/ruff format --check .
	$(VENV)/yamllint --strict .
	$(VENV)/ansible-lint
	$(VENV)/python tools/render_rules_table.py --check
	$(VENV)/python tools/render_defaults.py --check
	$(VENV)/python tools/render_role_vars.py --check
	$(VENV)/python tools/render_seats.py --check

# Rewrite the generated tables (docs/variables.md, docs/rules.md) after changing a role's argument
# specs, the node contract or a rule, and docs/seats.md (what each seed seat still needs) after changing
# a recipe, a rule or the planner; make lint fails while they are stale.
docs:
	$(VENV)/python tools/render_rules_table.py
	$(VENV)/python tools/render_role_vars.py
	$(VENV)/python tools/render_seats.py

# The collection tarball, seatwright-fleet-<version>.tar.gz, in .cache/dist/ (galaxy.yml's
# build_ignore keeps the venv, caches, evidence and bench results out of it).
collection:
	$(VENV)/ansible-galaxy collection build --force --output-path .cache/dist

molecule: router-venvs
	molecule test

test: unit lint integration molecule
