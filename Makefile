# burst: two commands for a newcomer.
#   make demo   set up .venv and run the local quickstart end to end
#   make test   set up .venv and run the whole test suite (what CI runs)
#   make test-fast  everything but the end-to-end tier (pytest -m "not e2e")
PYTHON ?= python3
VENV ?= .venv
# CPU torch by default (a build is cached on these machines); a GPU user picks another:
#   make demo TORCH_SPEC="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu130"
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast lint typecheck goldens checkov clean setup system-deps

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet $(TORCH_SPEC)
	$(BIN)/pip install --quiet -e '.[train,test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/burst run examples/quickstart.yaml

# Debian packages the tests use for real (docker-registry, chromium); see scripts/system-deps.sh
system-deps:
	bash scripts/system-deps.sh

# Both tiers: unit and in-process tests, and the end-to-end tier (full pipeline runs, real
# servers, Terraform, torchrun ranks: tests marked e2e). The one command CI runs.
test: $(STAMP) system-deps
	$(BIN)/ruff check .
	$(MAKE) typecheck
	$(BIN)/python -m pytest -q --durations=25

# Everything but the end-to-end tier: what to run while editing.
test-fast: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -m "not e2e"

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check burst steps pipelines tests devtools benchmarks scripts
	$(MAKE) typecheck

typecheck: $(STAMP)
	$(BIN)/mypy burst steps pipelines devtools

# Rewrite every golden (tests fail when one drifts): the compiled Argo manifests, the
# quickstart's rendered Terraform plan, the Kyverno policy rendered from trust.yaml, and
# their copies in the deploy/ bundle.
goldens: $(STAMP)
	$(BIN)/burst compile --out pipelines/compiled
	BURST_UPDATE_GOLDENS=1 $(BIN)/python -m pytest -q tests/terraform/test_tf_plan_golden.py
	$(BIN)/burst image kyverno --out policies/admission/kyverno-verify-images.yaml
	cp pipelines/compiled/burst-train.yaml pipelines/compiled/burst-reaper.yaml \
		pipelines/compiled/burst-regional.yaml deploy/argo/
	$(BIN)/burst image kyverno --out deploy/kyverno/verify-images.yaml

checkov:
	bash scripts/checkov.sh

clean:
	rm -rf runs .pytest_cache
