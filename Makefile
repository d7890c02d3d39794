# Phalanx developer entry points. `make help` lists them; docs/testing.md explains the test setup.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
CARGO ?= cargo
TARGET_DIR ?= $(or $(CARGO_TARGET_DIR),target)

.PHONY: help bins kueue workloads karpenter test-kueue test-workloads test-autoscaling workloads-up workloads-down cluster-up cluster-down cluster-status test lint fmt-check clippy crds bench bench-compare bench-e2e bench-pack quickstart quickstart-down chaos chaos-smoke image test-image image-reproducible release test-release test-compat test-compat-all

help: ## Show this list
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-15s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

bins: ## Build/cache etcd, kube-apiserver, KCM, kube-scheduler, kubectl, kwok, helm (hack/build-bins.sh)
	hack/build-bins.sh

kueue: ## Build/cache Kueue's manager and copy its CRDs and webhooks from its Go module (hack/build-kueue.sh; ~10 min cold)
	hack/build-kueue.sh

workloads: ## Build/cache the workload controllers (JobSet, LeaderWorkerSet, KubeRay, Kubeflow Trainer, MPI Operator) with their CRDs and webhooks from their Go modules (hack/build-workloads.sh; 1-2 min each with k8s.io modules cached)
	hack/build-workloads.sh

karpenter: ## Build/cache Karpenter's KWOK cloud provider with its CRDs from its Go module (hack/build-workloads.sh karpenter; minutes cold)
	hack/build-workloads.sh karpenter

cluster-up: bins ## Start the local control plane; prints `export KUBECONFIG=...` (UPSTREAM_WORKLOAD_API=1 for upstream's API)
	@hack/cluster.sh up

cluster-down: ## Stop the local control plane and remove its state
	@hack/cluster.sh down

cluster-status: ## Show the local control plane's processes and readiness
	@hack/cluster.sh status

fmt-check:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

lint: fmt-check clippy ## rustfmt check + clippy -D warnings

test: bins lint ## bins, fmt check, clippy, then all unit and integration tests (real control plane per test binary)
	$(CARGO) test --workspace

test-compat: ## Compatibility suite on one version: K8S_VERSION=v1.34.4 make test-compat (hack/test-compat.sh --list)
	hack/test-compat.sh

test-compat-all: ## Compatibility suite on v1.34.4, v1.35.4, v1.36.3, v1.37.2 and v1.38.0-beta.0 (builds each control plane once, ~20 min each cold; 1.38 with Go 1.27)
	hack/test-compat.sh --all

test-kueue: bins kueue ## Phalanx under Kueue: Kueue admits by quota, Phalanx gang-schedules (not in `make test`: cold Kueue build)
	$(CARGO) test -p phalanx-controllers --features kueue-test --test kueue

workloads-up: ## Start JobSet and LeaderWorkerSet beside the quick start's cluster (hack/workloads-up.sh; NAMES='kuberay mpi-operator' for more)
	hack/workloads-up.sh $(NAMES)

workloads-down: ## Stop what workloads-up started
	hack/workloads-up.sh down

test-workloads: bins workloads ## Phalanx beside JobSet, LeaderWorkerSet, KubeRay, Kubeflow Trainer and MPI Operator: per-kind groups bound whole (not in `make test`: cold controller builds)
	$(CARGO) test -p phalanx-controllers --features workloads-test --test workloads

test-autoscaling: bins karpenter ## Phalanx beside Karpenter (KWOK provider): pending gangs get nodes and bind whole, or not at all (not in `make test`: cold Karpenter build)
	$(CARGO) test -p phalanx-controllers --features autoscaling-test --test autoscaling -- --nocapture

crds: ## Regenerate crds/phalanx.yaml and the chart's CRDs from the Rust types (hack/gen-crds.sh)
	hack/gen-crds.sh

bench: ## Scheduler benchmarks
	$(CARGO) bench -p phalanx-scheduler

bench-compare: ## Core bench of BASE (default main) vs the working tree, run alternately, as ratios: BASE=<rev> CASES='gang8 gang1000' ROUNDS=5 (hack/bench-compare.sh)
	BASE='$(BASE)' CASES='$(CASES)' ROUNDS='$(ROUNDS)' CARGO='$(CARGO)' hack/bench-compare.sh

bench-e2e: bins ## End-to-end: Phalanx vs upstream kube-scheduler vs raw bind rate (BENCH_E2E_ARGS='--nodes 500 --gangs 500 --rounds 3')
	$(CARGO) build --release -p phalanx --bin phalanx
	$(CARGO) run --release -p phalanx-bench -- $(BENCH_E2E_ARGS)

bench-pack: bins ## Packing: a seeded burst of GPU gang jobs, kube-scheduler (default, MostAllocated) vs Phalanx (BENCH_PACK_ARGS='--svg docs/bench-pack-occupancy.svg')
	$(CARGO) build --release -p phalanx --bin phalanx
	$(CARGO) run --release -p phalanx-bench -- pack $(BENCH_PACK_ARGS)

chaos: bins ## Chaos suite: 2 real replicas under faults, invariants I1-I8 (CHAOS_ARGS='--only leader-kill --runs 5'); docs/testing.md
	$(CARGO) build -p phalanx --bin phalanx
	$(CARGO) build -p phalanx-chaos --bin phalanx-chaos
	$(TARGET_DIR)/debug/phalanx-chaos --profile full --phalanx-bin $(TARGET_DIR)/debug/phalanx $(CHAOS_ARGS)

chaos-smoke: bins ## The chaos suite's subset that `make test` runs (one run per fault, a few minutes)
	$(CARGO) test -p phalanx-chaos --test chaos_smoke -- --nocapture

quickstart: bins ## Local cluster + Phalanx + a sample gang (hack/quickstart.sh)
	hack/quickstart.sh

quickstart-down: ## Stop the quick start: its phalanx run and its cluster, logs kept (hack/quickstart.sh down)
	hack/quickstart.sh down

image: ## Container image without an engine (hack/image.sh): target/image/phalanx-<version>-linux-<arch>.tar for docker/podman load, crane push
	hack/image.sh

test-image: ## The image test: builds it, unpacks it, runs the binary, checks config, name, layer, crane push, repackaging (in `make test` too)
	$(CARGO) test -p phalanx --test image

image-reproducible: ## Two builds of HEAD give one digest: `make image` here and a fresh clone built from scratch (slow: a cold release build)
	hack/image-reproducible.sh

release: ## A release: image (amd64+arm64 index), OCI chart, archives, SBOM, krew manifest: REGISTRY=ghcr.io/<owner> [VERSION=X.Y.Z] [RELEASE_ARGS=--dry-run] (hack/release.sh)
	hack/release.sh $(if $(REGISTRY),--registry "$(REGISTRY)") $(if $(VERSION),--version "$(VERSION)") $(RELEASE_ARGS)

test-release: bins ## The release test: hack/release.sh to a loopback registry, chart installed from it, its image binds a gang (cold arm64 build, 15-25 min)
	$(CARGO) test -p phalanx-e2e --test chart_cluster -- --ignored --exact a_release_on_a_loopback_registry_installs_from_it_and_its_image_binds_a_gang --nocapture
