# burst: two commands for a newcomer.
#   make demo   set up .venv and run the local quickstart end to end
#   make test   set up .venv and run the whole test suite (what CI runs)
#   make test-fast  everything but the end-to-end tier (pytest -m "not e2e")
#   make images     build the steps image and the CPU trainer image here (docs/images.md)
PYTHON ?= python3
VENV ?= .venv
# CPU torch by default (a build is cached on these machines); a GPU user picks another:
#   make demo TORCH_SPEC="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu130"
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Tests run in parallel (pytest-xdist): one worker per core and two more (many tests wait on
# a server, a lease's lapse, a timeout or a child process, and the spare workers keep the
# cores busy meanwhile: with one spare, pytest used about 70 % of 2 cores here);
# TEST_WORKERS=0 runs them in this process. A file's tests that share a module-scoped fixture stay on one worker
# (tests/conftest.py groups them for --dist loadgroup).
TEST_WORKERS ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 1) + 2 )))
# make test-fast: one worker per core (its tests are short and busy the CPU).
FAST_WORKERS ?= auto
PYTEST := $(BIN)/python -m pytest -q --dist loadgroup
# Compiled bytecode is cached (__pycache__, ignored by git): every test worker and every step
# process the tests start would otherwise compile burst from source again.
unexport PYTHONDONTWRITEBYTECODE
# When make started (setup included): test and test-fast print their time from here.
STARTED := $(shell date +%s)
ELAPSED = echo "make $@: $$(( $$(date +%s) - $(STARTED) )) s"

.PHONY: demo test test-long test-fast test-containers test-cluster engines lint typecheck goldens checkov clean setup system-deps images

setup: $(STAMP)

# Packages are installed with uv (pinned): it downloads in parallel and links from its cache
# in ~/.cache/uv, and compiles the bytecode on every core (pip compiles on one: 100 s here for
# setup with pip). The bytecode is compiled at install: without it every process would
# compile what it imports, and the test workers that start together would each compile torch.
# Torch first, then the rest.
UV_VERSION ?= 0.13.9
# uv reads none of pip's configuration: scripts/uv_pip_args.py passes on pip's indexes and
# find-links (where these machines keep the CPU torch wheel), best match across them as pip.
UV := $(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python \
	--index-strategy unsafe-best-match $$($(PYTHON) scripts/uv_pip_args.py)
# The venv gets no pip of its own (ensurepip took about 5 s of a fresh clone's setup): the
# system's pip puts uv in it (pip >= 22.3, --python), else the venv's own pip does;
# `.venv/bin/uv pip install` adds packages.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv --without-pip $(VENV)
	$(PYTHON) -m pip --python $(BIN)/python install --quiet uv==$(UV_VERSION) 2>/dev/null \
		|| { $(BIN)/python -m ensurepip --default-pip >/dev/null \
		&& $(BIN)/python -m pip install --quiet uv==$(UV_VERSION); }
	$(UV) $(TORCH_SPEC)
	$(UV) -e '.[train,test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/burst run examples/quickstart.yaml

# Debian packages the tests use for real (docker-registry, chromium); see scripts/system-deps.sh.
# The container tier's (podman, runc, buildah, mmdebstrap, uidmap) come with make images
# (scripts/container-deps.sh); without them or the images, that tier skips with one line.
system-deps:
	bash scripts/system-deps.sh

# The steps image and the CPU trainer image (TRAINER_VARIANT=cuda: the one users deploy), with
# docker buildx or podman, whichever can start containers; where the pinned public base cannot
# be pulled, on a Debian base made with mmdebstrap (cached in ~/.cache/burst). Sizes, digests
# and build times are printed. Pushing and signing for a registry: images/build.sh.
TRAINER_VARIANT ?= cpu
images: $(STAMP)
	bash scripts/container-deps.sh
	$(BIN)/python -m devtools.images all --variant $(TRAINER_VARIANT)

# Both tiers: unit and in-process tests, and the end-to-end tier (full pipeline runs, real
# servers, Terraform, torchrun ranks: tests marked e2e). The one command CI runs.
test: $(STAMP) system-deps
	$(BIN)/ruff check .
	$(MAKE) --no-print-directory typecheck
	$(PYTEST) -n $(TEST_WORKERS) --durations=25 || { rc=$$?; $(ELAPSED) "(failed)"; exit $$rc; }
	@$(ELAPSED)

# The tests that run for minutes by design, mostly waiting (marked `minutes`: a regional run
# whose workers train over 5 minutes on the default lease; the hostile cases that wait out
# burst's real bounds against a silent server). make test skips them; .ci/run runs them
# after it, two at a time (they wait, they do not compute).
test-long: $(STAMP)
	BURST_MINUTES_TESTS=1 $(PYTEST) -n 2 -m minutes || { rc=$$?; $(ELAPSED) "(failed)"; exit $$rc; }
	@$(ELAPSED)

# Everything but the end-to-end tier: what to run while editing.
# The container tier alone (pytest -m containers), building the images first where they are
# missing. make test runs this tier only where the images are already built: a cold build
# (about 13 minutes here) is more than the whole suite's budget.
test-containers: images
	BURST_CONTAINER_BUILD=1 $(PYTEST) -n 0 -m containers || { rc=$$?; $(ELAPSED) "(failed)"; exit $$rc; }
	@$(ELAPSED)

# The engines tier (tests/cluster, docs/reference/engines-tier.md): Kubernetes, etcd, Argo and
# Kueue built from their Go modules at pinned versions (devtools/engines.py; cached in
# ~/.cache/burst/engines for every clone: cold about 15 minutes here, warm seconds), a control
# plane on loopback, Argo's controller and executor, Kueue, the stand-in kubelet. `make test`
# does not collect it; .ci/run runs both.
engines: $(STAMP)
	$(BIN)/python -m devtools.engines

# The engines tier runs the step pods on real kubelets in the images `make images` builds;
# where they cannot be built here it says why and the stand-in kubelet runs them
# (docs/reference/engines-tier.md).
test-cluster: engines
	$(MAKE) --no-print-directory images || echo "test-cluster: make images failed: the step pods run on the stand-in kubelet"
	BURST_CLUSTER_TIER=1 $(PYTEST) -n 0 -p no:cacheprovider --timeout=1800 tests/cluster || { rc=$$?; $(ELAPSED) "(failed)"; exit $$rc; }
	@$(ELAPSED)

test-fast: $(STAMP)
	$(BIN)/ruff check .
	$(PYTEST) -n $(FAST_WORKERS) -m "not e2e" || { rc=$$?; $(ELAPSED) "(failed)"; exit $$rc; }
	@$(ELAPSED)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check burst tests devtools benchmarks scripts
	$(MAKE) typecheck

# mypy's cache lives in ~/.cache/burst (shared by clones, like the checkov and DeepSpeed caches):
# a module is re-checked when its content's hash changes, so a fresh clone reuses what an
# earlier one checked (torch and transformers alone are about 50 CPU-seconds cold).
MYPY_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/burst/mypy
typecheck: $(STAMP)
	$(BIN)/mypy --cache-dir $(MYPY_CACHE) burst devtools

# Rewrite every golden (tests fail when one drifts): the compiled Argo manifests, the
# quickstart's rendered Terraform plan, the Kyverno policy rendered from trust.yaml, their
# copies in the deploy/ bundle, and deploy/kueue generated from the catalog.
goldens: $(STAMP)
	$(BIN)/burst compile --out burst/pipelines/compiled
	BURST_UPDATE_GOLDENS=1 $(BIN)/python -m pytest -q tests/terraform/test_tf_plan_golden.py
	$(BIN)/burst image kyverno --out policies/admission/kyverno-verify-images.yaml
	cp burst/pipelines/compiled/burst-train.yaml burst/pipelines/compiled/burst-reaper.yaml \
		burst/pipelines/compiled/burst-reaper-cron.yaml burst/pipelines/compiled/burst-regional.yaml deploy/argo/
	$(BIN)/burst image kyverno --out deploy/kyverno/verify-images.yaml
	BURST_CATALOG= $(BIN)/burst kueue --out deploy/kueue

checkov:
	bash scripts/checkov.sh

clean:
	rm -rf runs .pytest_cache
