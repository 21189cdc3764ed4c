# Flow: one binary on PostgreSQL. `make run` starts it on a private
# PostgreSQL; `make test` runs the whole suite.

SHELL   := /bin/bash
GO      ?= go
BIN     ?= bin/flow
# -buildvcs=true stamps the commit and time into the binary (Version RPC),
# overriding a GOFLAGS that turns it off.
BUILDFLAGS ?= -buildvcs=true
# The timeout bounds a package, not the suite: the app package ran into a
# 25-minute timeout at a load average of 40 (its tests had not failed), so
# 45 leaves a hung test as the likely cause.
TESTFLAGS  ?= -count=1 -timeout 45m

.PHONY: run build test soak ha-test fuzz generate verify bench clean image image-test

run: build ## Flow on the embedded default: private PostgreSQL in .flow/dev, simulators, dev mode
	./$(BIN) dev $(ARGS)

build:
	$(GO) build $(BUILDFLAGS) -o $(BIN) ./cmd/flow

# make test prints one line per package, the whole output of each failing
# test and, at the end, the ten slowest tests (cmd/testsum reads go test
# -json); TESTSUM_SLOWEST changes how many. The whole -json stream, every
# passing test's output too, is kept in TEST_JSON for a failure to read.
TESTSUM_SLOWEST ?= 10
TEST_JSON ?= $${TMPDIR:-/tmp}/flow-make-test.json
test: ## the whole suite, on a private PostgreSQL the tests start (or TEST_DATABASE_URL)
	set -o pipefail; $(GO) test $(TESTFLAGS) -json ./... | tee $(TEST_JSON) | $(GO) run ./cmd/testsum -slowest $(TESTSUM_SLOWEST)

# make soak: the kill, crash and restart tests in their long form
# (FLOW_SOAK=1: TestKillDuringRollout runs 50 racks and 10 kills,
# TestScheduleKillLoop 100 schedules and 10 kills), SOAK_COUNT rounds, each
# with other random kill points, and the longest tests, which make test
# skips (soakOnly in app/main_test.go: each took 25-85 s of it). Longer
# than `make test`; CI runs it after.
SOAK_COUNT ?= 1
SOAK_RUN   ?= Crash|Kill|TwoEngines|PostgresRestart|PostgresFailover|PostgresOutage|RollingRestart|SurvivesItsDeath|IdleDev
soak: ## kill, crash and restart tests, SOAK_COUNT rounds each
	FLOW_SOAK=1 $(GO) test -count=$(SOAK_COUNT) -timeout 40m -run '$(SOAK_RUN)' ./...

# make ha-test: the Patroni chaos test (app/ha_e2e_test.go, FLOW_HA=1):
# etcd and three PostgreSQL members under Patroni (synchronous_mode, the
# recipe of docs/operations.md), HAProxy, two flow serve replicas (the
# first half of the faults both on every member's address, the second
# half both through HAProxy), 200 racks worked on (resets, firmware
# upgrades, a rollout, schedules firing every 5 s), and HA_FAULTS faults
# one at a time (kill -9 the primary's postmaster, freeze the primary
# beyond Patroni's ttl, switchover, restart a standby, kill -9 a Flow
# replica during a switchover, lose one etcd member), checking after each
# that every acknowledged submission exists and completes, that no device
# is reset or upgraded twice, that the rollout is consistent and that each
# schedule fired once per firing time. Its last line: `N faults in …;
# unavailability p50 …, max …; …`. Needs Debian's patroni, etcd-server
# and haproxy (.ci/run installs them); CI runs it after make soak.
HA_FAULTS ?= 20
ha-test: ## the Patroni chaos test: HA_FAULTS faults on a real Patroni cluster
	FLOW_HA=1 FLOW_HA_FAULTS=$(HA_FAULTS) $(GO) test -count=1 -timeout 60m -v -run '^TestPatroniChaos$$' ./app/ 2>&1 | grep --line-buffered -v -E '^\{|level=' ; exit $${PIPESTATUS[0]}

# make fuzz: each fuzz target (docs/limits.md) for its own number of
# executions (the third field of FUZZ_TARGETS, about 30 s each on two cores),
# or for FUZZTIME if given (a duration, or Nx), with FUZZPARALLEL workers; new
# inputs land in Go's fuzz cache, failures in the package's
# testdata/fuzz/<target>/ (commit them as regression seeds once fixed).
# Counts, not durations, by default: Go 1.26's fuzz coordinator can fail a
# duration-bounded run with a bare "context deadline exceeded" when the time
# runs out (golang/go#75804, fixed in Go 1.27); a count has no deadline to race.
FUZZTIME         ?=
FUZZPARALLEL     ?= 1
FUZZMINIMIZETIME ?= 5s
FUZZ_TARGETS     ?= FuzzHandlers:./app:1000x FuzzStrictJSON:./edge:20000x FuzzRuleDefinition:./operations:10000x FuzzEnvelope:./firmware:60000x
fuzz: ## each fuzz target for its execution count (about 30 s each), or FUZZTIME
	@for t in $(FUZZ_TARGETS); do \
		name=$${t%%:*}; rest=$${t#*:}; pkg=$${rest%%:*}; budget=$${rest#*:}; \
		if [ -n "$(FUZZTIME)" ]; then budget="$(FUZZTIME)"; fi; \
		echo "fuzz $$name ($$pkg) for $$budget"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $$budget -fuzzminimizetime $(FUZZMINIMIZETIME) -parallel $(FUZZPARALLEL) $$pkg || exit 1; \
	done

generate: ## buf and sqlc, with the versions pinned in go.mod's tool block; the chart's copies of the alerts and dashboard
	$(GO) tool buf generate
	@if [ -f sqlc.yaml ]; then $(GO) tool sqlc generate; fi
	cp deploy/prometheus/alerts.yaml deploy/grafana/flow.json deploy/helm/flow/files/

verify: ## generated code is current, go vet, gofmt
	$(GO) tool buf generate
	@if [ -f sqlc.yaml ]; then $(GO) tool sqlc diff; fi
	git diff --exit-code -- proto/gen
	@test -z "$$(git status --porcelain -- proto/gen)" || (echo "proto/gen has untracked or changed files: run make generate" && exit 1)
	$(GO) vet ./...
	@out="$$(gofmt -l $$(git ls-files '*.go' | grep -v '/gen/\|/dbsqlc/'))"; test -z "$$out" || (echo "gofmt needed:"; echo "$$out"; exit 1)

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# make image: Flow's container image (Containerfile, docs/deploy.md) with
# podman, from the empty base, so no registry is needed: the static binary
# built here (CGO_ENABLED=0) and the system CA roots, nothing else; labels
# carry the version and commit, which are also linked into the binary (Go
# stamps them itself only from a clone whose .git is a folder). It then
# runs `flow version` in the image and checks there is no shell and that
# the image is under IMAGE_MAX_MB (10^6 bytes) unpacked (what `podman
# image ls` shows) and under IMAGE_MAX_PACKED_MB compressed (what a
# registry stores and a node pulls). Podman runs with runc, cgroupfs and
# deploy/podman/containers.conf (no default ulimits): this machine kind
# lacks CAP_SYS_RESOURCE, and crun fails.
# Each is computed once per make run (a plain ?= would run git again at
# every use): `make image-test` then tests the image `make image` just
# built even when the tree changes in between, which turns the tag -dirty.
ifeq ($(origin VERSION),undefined)
VERSION      := $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
endif
ifeq ($(origin REVISION),undefined)
REVISION     := $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
endif
ifeq ($(origin COMMIT_TIME),undefined)
COMMIT_TIME  := $(shell TZ=UTC git show -s --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ HEAD 2>/dev/null)
endif
ifeq ($(origin DIRTY),undefined)
DIRTY        := $(shell test -z "$$(git status --porcelain 2>/dev/null)" || echo +dirty)
endif
IMAGE        ?= localhost/flow:$(VERSION)
IMAGE_MAX_MB ?= 45
IMAGE_MAX_PACKED_MB ?= 15
PODMAN       ?= CONTAINERS_CONF=$(CURDIR)/deploy/podman/containers.conf podman --runtime runc --cgroup-manager cgroupfs
IMAGE_LDFLAGS = -s -w -X github.com/nicoflow/flow/app.linkVersion=$(VERSION) \
	-X github.com/nicoflow/flow/app.linkRevision=$(REVISION)$(DIRTY) -X github.com/nicoflow/flow/app.linkTime=$(COMMIT_TIME)
image: ## the container image $(IMAGE), with podman; runs flow version in it
	rm -rf bin/image && mkdir -p bin/image/context
	CGO_ENABLED=0 $(GO) build $(BUILDFLAGS) -trimpath -ldflags='$(IMAGE_LDFLAGS)' -o bin/image/context/flow ./cmd/flow
	cp /etc/ssl/certs/ca-certificates.crt bin/image/context/
	$(PODMAN) build --quiet -f Containerfile -t $(IMAGE) \
		--build-arg VERSION=$(VERSION) --build-arg REVISION=$(REVISION) \
		--build-arg CREATED=$$(date -u +%Y-%m-%dT%H:%M:%SZ) bin/image/context
	$(PODMAN) run --rm $(IMAGE) version
	@if $(PODMAN) run --rm --entrypoint /bin/sh $(IMAGE) -c true >/dev/null 2>&1; then echo "image: $(IMAGE) has a shell"; exit 1; fi
	$(PODMAN) save --quiet --compress --format docker-dir -o bin/image/saved $(IMAGE)
	@set -e; size=$$($(PODMAN) image inspect --format '{{.Size}}' $(IMAGE)); packed=$$(du -sb bin/image/saved | cut -f1); \
		echo "image: $(IMAGE): $$size bytes unpacked, $$packed bytes compressed (pulled), no shell"; \
		test $$size -lt $$(($(IMAGE_MAX_MB) * 1000 * 1000)) || { echo "image: over $(IMAGE_MAX_MB) MB unpacked"; exit 1; }; \
		test $$packed -lt $$(($(IMAGE_MAX_PACKED_MB) * 1000 * 1000)) || { echo "image: over $(IMAGE_MAX_PACKED_MB) MB compressed"; exit 1; }

# make image-test: builds the image, then runs it as the Helm chart does
# (deploy/helm/image_test.go): migrations from two containers at once, then
# flow serve against a PostgreSQL that takes only TLS with a client
# certificate, the certificates mounted where the chart mounts them; waits
# for /readyz, makes an mTLS call, stops it with SIGTERM (exit 0).
image-test: image ## run the image as the chart does: readiness, an mTLS call, SIGTERM
	FLOW_IMAGE=$(IMAGE) $(GO) test -count=1 -timeout 15m -tags imagetest -run 'TestImage' -v ./deploy/helm/

clean:
	rm -rf bin
