# instinct.vllm — the two commands a newcomer needs are `make demo` and `make test`.
# Everything else here is a step of those two, usable on its own.
SHELL := /bin/bash
.DEFAULT_GOAL := help
export INSTINCT_CACHE ?= /var/cache/instinct-vllm

.PHONY: help test test-fleet demo demo-fleet demo-down bench bench-fleet venv collections image image-trixie host-packages lint sanity pythons unit lock release

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

test: ## the whole suite: setup, yamllint, ansible-lint, sanity, ruff, pytest, every Molecule scenario (fleet included)
	scripts/test

test-fleet: ## only the fleet scenario (gateway + two nodes, two rolling updates under load; long)
	SCENARIOS=fleet STAGES=molecule scripts/test

demo: host-packages venv collections image ## deploy the whole stack into a local sandbox node and print the endpoint (FLEET=1: the fleet)
	INSTINCT_DEMO_FLEET=$(FLEET) .venv/bin/python scripts/demo up

demo-fleet: host-packages venv collections image ## a gateway + two sandbox nodes; prints the gateway URL and a client key
	.venv/bin/python scripts/demo up --fleet

demo-down: venv ## remove the demo sandbox node (and the fleet's containers)
	.venv/bin/python scripts/demo down

bench: host-packages venv ## model conversion benchmark; writes docs/benchmarks.md (FLEET=1: then bench-fleet too)
	.venv/bin/python scripts/bench
	$(if $(FLEET),$(MAKE) bench-fleet)

bench-fleet: host-packages venv collections image ## the fleet scenario, long variant (a new vLLM venv in every rollout, 10 min of saturation): its figures into docs/benchmarks.md
	.venv/bin/python scripts/fleet-bench run

host-packages: ## Debian packages the harness needs (podman, runc, debootstrap, ...)
	scripts/host-packages

venv: host-packages ## the pinned controller virtualenv .venv/
	scripts/venv

collections: venv ## .collections/: this checkout as instinct.vllm + pinned third-party collections
	.venv/bin/python scripts/collections

image: host-packages ## the sandbox host image (debootstrap, systemd as PID 1), rebuilt only when its recipe changes
	tests/sandbox/build-image.sh

image-trixie: host-packages ## opt-in: the same sandbox image from Debian 13 (localhost/instinct-sandbox-trixie)
	tests/sandbox/build-image.sh trixie

lint: venv collections ## yamllint, ansible-lint (production), ruff, antsibull-docs lint
	STAGES="yamllint ansible-lint ruff docs-lint" scripts/test

sanity: venv collections ## ansible-test sanity
	STAGES="sanity" scripts/test

pythons: venv collections ## opt-in: ansible-test sanity and the unit tests on each Python the stacks name (scripts/pythons)
	scripts/pythons

unit: venv collections ## pytest unit tests
	STAGES="pytest" scripts/test

release: venv collections ## changelog, tarball, Galaxy's import checks; prints what would be uploaded (RELEASE_GPG_KEY=<fingerprint>: signs the project content)
	PATH="$(CURDIR)/.venv/bin:$$PATH" .venv/bin/python scripts/release

lock: ## regenerate requirements/dev.txt from requirements/dev.in
	python3 -m venv .cache/lock-venv && .cache/lock-venv/bin/pip install -q -r requirements/dev.in \
	  && .cache/lock-venv/bin/pip freeze --exclude-editable | grep -v '^pip==' > requirements/dev.txt \
	  && rm -rf .cache/lock-venv
