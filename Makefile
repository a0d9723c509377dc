# Thin wrapper over the project's scripts. `make test` is the one command CI runs (.ci/run).
SHELL := /bin/bash
VENV := .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: venv k8s k8s-versions image release upgrade-test lint test test-unit test-integration test-e2e \
	smoke-versions demo cluster-up bench soak upstream-bats protos kubemodels clean

venv:
	@tools/venv.sh

k8s:
	@tools/k8s/build.sh

# The other Kubernetes minors the chart admits (KUBE_COMPAT_VERSIONS in tools/k8s/versions.env): their
# Kubernetes binaries beside the default version's, which lend them everything else (docs/kubernetes-versions.md).
k8s-versions: k8s
	@source tools/k8s/versions.env && for v in $$KUBE_COMPAT_VERSIONS; do tools/k8s/build-kube.sh "$$v" || exit 1; done

# The project's image alone (`make k8s` builds it too, with the local cluster's images): one OCI image
# index for linux/amd64 and linux/arm64, ${IMEXDRA_CACHE:-~/.cache/imexdra}/images/imexdra.tar (docs/image.md).
image:
	@tools/image/build.sh imexdra

# Publish a release to a registry (docs/registry.md): the image index `make image` built and the chart,
# as an OCI artifact naming that image by digest. crane and helm come from `make k8s` or PATH.
# e.g. make release REGISTRY=registry.example.com/gpu RELEASE_ARGS=--ca-file=ca.pem
REGISTRY ?=
VERSION ?=
RELEASE_ARGS ?=
release: venv image
	@test -n "$(REGISTRY)" || { echo "usage: make release REGISTRY=<host>[/<path>] [VERSION=x.y.z] [RELEASE_ARGS=--ca-file=<pem>]" >&2; exit 2; }
	$(BIN)/python tools/release.py --registry=$(REGISTRY) $(if $(VERSION),--version=$(VERSION)) $(RELEASE_ARGS)

# Upgrade and rollback with a workload running (not CI; about 5 min): the release of UPGRADE_FROM (built
# from a worktree of that commit) to this tree and back, tests/e2e/test_upgrade.py; its phases are
# written to bench/results/upgrade.json. The baseline is the commit CHANGELOG.md names for the last release.
UPGRADE_FROM ?= 4d254d8
upgrade-test: venv k8s
	$(BIN)/pytest tests/e2e/test_upgrade.py --upgrade-from=$(UPGRADE_FROM) $(PYTEST_ARGS)

lint: venv
	$(BIN)/ruff check src sim tests bench tools
	$(BIN)/ruff format --check src sim tests bench tools
	$(BIN)/mypy
	# The benchmarks are scripts beside each other (no package); matplotlib is not in the lint venv.
	cd bench && MYPYPATH=../src:../sim/src:. ../$(BIN)/mypy --strict --ignore-missing-imports \
		--follow-imports=silent --cache-dir ../.mypy_cache/bench *.py
	$(BIN)/lint-imports

test-unit: venv
	$(BIN)/pytest tests/unit $(PYTEST_ARGS)

test-integration: venv k8s
	$(BIN)/pytest tests/integration $(PYTEST_ARGS)

test-e2e: venv k8s
	$(BIN)/pytest tests/e2e $(PYTEST_ARGS)

# All tiers, after lint. The integration and e2e tiers run against the real local control plane.
# They run at once as lanes (the unit tier, the integration tier, the e2e tier in three), each a pytest
# process in a network namespace of its own (tools/testlanes.py, docs/testing.md "Lanes"); each lane's
# log, junit and times go to $(TEST_LANES)/<lane>/, and all lanes' figures to $(TEST_LANES)/lanes.json.
# PYTEST_ARGS go to every lane (e.g. PYTEST_ARGS='-k node_loss').
TEST_LANES ?= build/test-lanes
test: lint k8s
	$(BIN)/python tools/testlanes.py --out=$(TEST_LANES) $(PYTEST_ARGS)

# The version smoke (not CI): the seed workloads and the driver-managed install on every Kubernetes minor
# the chart admits; results in bench/results/kube_versions.json (docs/kubernetes-versions.md).
SMOKE_ARGS ?=
smoke-versions: venv k8s-versions
	$(BIN)/python bench/kube_versions.py $(SMOKE_ARGS)

# The main job: the seed MPIJob with a ComputeDomain on a simulated NVL72 rack (DEMO_ARGS e.g. --host-managed).
# `demo` is imexdra-sim's command (sim/), which tools/venv.sh installs beside the driver.
DEMO_ARGS ?=
demo: venv k8s
	$(BIN)/imexdra demo $(DEMO_ARGS)

# Benchmarks (not part of CI): JSON and PNG plots under bench/results/; the bench extra adds matplotlib.
bench: venv k8s
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[bench]'
	$(BIN)/python bench/prepare_bench.py
	$(BIN)/python bench/controller_bench.py
	$(BIN)/python bench/jobstart_bench.py
	$(BIN)/python bench/rack_bench.py
	$(BIN)/python bench/import_rss.py

# Reliability soak (not CI; about an hour on 2 cores): >= 100 000 fuzz inputs, >= 100 plugin SIGKILLs,
# 20 daemon SIGKILLs (bounded by the kubelet's restart backoff), 20 rounds of controller SIGKILLs
# mid-create/mid-delete (driver-managed and under channel isolation) and the control-plane fault test.
# It writes no result file; the figures of the last soak are in bench/README.md, "Figures without a result file".
SOAK_PLUGIN_KILLS ?= 100
SOAK_DAEMON_KILLS ?= 20
SOAK_CONTROLLER_ROUNDS ?= 20
soak: venv k8s
	IMEXDRA_SOAK=1 $(BIN)/pytest -q tests/unit/fuzz $(PYTEST_ARGS)
	IMEXDRA_PLUGIN_KILLS=$(SOAK_PLUGIN_KILLS) IMEXDRA_DAEMON_KILLS=$(SOAK_DAEMON_KILLS) \
	IMEXDRA_CONTROLLER_KILL_ROUNDS=$(SOAK_CONTROLLER_ROUNDS) $(BIN)/pytest -q \
		$(PYTEST_ARGS) tests/integration/test_crash_plugin.py tests/integration/test_daemon.py \
		tests/integration/test_controller_resilience.py tests/integration/test_control_plane_faults.py

# Upstream's own bats suite for ComputeDomains (not CI; about 15 min) against this tree's release, installed
# from the local cluster's registry, on a 2-tray containerd rack: UPSTREAM is a git checkout of
# kubernetes-sigs/dra-driver-nvidia-gpu, run unchanged. Results: bench/results/upstream_bats.json
# (docs/upstream-tests.md). bats from PyPI (the upstream-bats extra), its libraries from Debian's packages.
UPSTREAM ?=
UPSTREAM_BATS_ARGS ?=
upstream-bats: venv k8s
	@test -n "$(UPSTREAM)" || { echo "usage: make upstream-bats UPSTREAM=<checkout of kubernetes-sigs/dra-driver-nvidia-gpu>" >&2; exit 2; }
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[upstream-bats]'
	tools/upstream/bats-libs.sh $(VENV)/upstream-bats
	$(BIN)/python tools/upstream/bats.py $(UPSTREAM) $(UPSTREAM_BATS_ARGS)

# A bare local cluster (no driver), kept running until Ctrl-C; for poking around.
cluster-up: venv k8s
	$(BIN)/python -m imexdra_sim.localcluster --nodes 2

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

protos: venv
	@tools/gen-protos.sh

# The Kubernetes models in src/imexdra/common/kube/models from KUBE_VERSION's OpenAPI spec, which `make k8s`
# brings into the Go module cache (docs/kube-client.md).
kubemodels: venv
	@$(BIN)/python tools/kubemodels/generate.py
