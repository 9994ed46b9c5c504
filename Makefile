# The two commands of the README, and their parts. Every target sets itself up first (idempotent).
.PHONY: preview preview-fleet up test lint typecheck unit setup setup-dev setup-venv-dev bench clean

# Main job: `pulumi preview` of the dev stack through the real engine (no cluster needed), with the
# platform owner's guardrails (docs/policy.md).
POLICY = --policy-pack policy/analyzer --policy-pack-config policy/config/dev.json
PLATFORM_POLICY = --policy-pack policy/analyzer --policy-pack-config policy/config/dev-platform.json
# Both stacks of the dev environment, platform first (docs/stacks.md): dev-platform, then the fleet dev.
preview: setup
	scripts/pulumi.sh dev-platform preview $(PLATFORM_POLICY)
	scripts/pulumi.sh dev preview $(POLICY)

# The catalog editor's quick loop: the fleet stack alone (models, fit check, caches, outputs), seconds
# instead of the platform's charts; before dev-platform is applied it previews against what
# Pulumi.dev.yaml asks of the platform, and says so.
preview-fleet: setup
	scripts/pulumi.sh dev preview $(POLICY)

# Second form: `pulumi up` of both, rendering every manifest into rendered/dev/ (plaintext Secrets!).
up: setup
	scripts/pulumi.sh dev-platform up --yes $(PLATFORM_POLICY)
	scripts/pulumi.sh dev up --yes $(POLICY)

# The whole test suite: lint + type check + every test tier (mocks, engine, Prometheus, API server).
# After the virtualenv, the rest of the setup (the Go builds, the servers) runs beside ruff, mypy and the
# tests that need nothing else (scripts/test_suite.sh --full).
test: setup-venv-dev
	bash scripts/test_suite.sh --full

setup:
	bash scripts/setup.sh

setup-dev:
	bash scripts/setup.sh --dev

setup-venv-dev:
	bash scripts/setup.sh --venv-dev

lint:
	.venv/bin/ruff check .

typecheck:
	.venv/bin/mypy .

# Four pytest processes (scripts/test_suite.sh says why): the plain tests beside the API-server tiers, the
# other tiers after the plain ones, then the tests that keep a real vLLM busy for minutes (marker vllm_solo)
# last and alone. Needs `make setup-dev` first.
unit:
	bash scripts/test_suite.sh

bench: setup-dev
	.venv/bin/python bench/sizing_accuracy.py --cases tests/data/calibration/cases.json --cases tests/data/calibration/cases-diverse.json --by group
	.venv/bin/python bench/program_eval.py
	bash -c 'source scripts/env.sh && .venv/bin/python bench/engine_preview.py'

clean:
	rm -rf rendered .pulumi-state .mypy_cache .ruff_cache .pytest_cache
