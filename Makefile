# Flow: one binary on PostgreSQL. `make run` starts it on a private
# PostgreSQL; `make test` runs the whole suite.

GO      ?= go
BIN     ?= bin/flow
# -buildvcs=true stamps the commit and time into the binary (Version RPC),
# overriding a GOFLAGS that turns it off.
BUILDFLAGS ?= -buildvcs=true
TESTFLAGS  ?= -count=1 -timeout 15m

.PHONY: run build test soak fuzz generate verify bench clean

run: build ## Flow on the embedded default: private PostgreSQL in .flow/dev, simulators, dev mode
	./$(BIN) dev $(ARGS)

build:
	$(GO) build $(BUILDFLAGS) -o $(BIN) ./cmd/flow

test: ## the whole suite, on a private PostgreSQL the tests start (or TEST_DATABASE_URL)
	$(GO) test $(TESTFLAGS) ./...

# make soak: the kill, crash and restart tests in their long form
# (FLOW_SOAK=1: TestKillDuringRollout runs 50 racks and 10 kills instead of
# 12 and 3, TestScheduleKillLoop 100 schedules and 10 kills instead of 30
# and 3), SOAK_COUNT rounds, each with other random kill points. Longer than
# `make test`; CI runs it after.
SOAK_COUNT ?= 1
SOAK_RUN   ?= Crash|Kill|TwoEngines|PostgresRestart|PostgresFailover
soak: ## kill, crash and restart tests, SOAK_COUNT rounds each
	FLOW_SOAK=1 $(GO) test -count=$(SOAK_COUNT) -timeout 40m -run '$(SOAK_RUN)' ./...

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

generate: ## buf and sqlc, with the versions pinned in go.mod's tool block
	$(GO) tool buf generate
	@if [ -f sqlc.yaml ]; then $(GO) tool sqlc generate; fi

verify: ## generated code is current, go vet, gofmt
	$(GO) tool buf generate
	@if [ -f sqlc.yaml ]; then $(GO) tool sqlc diff; fi
	git diff --exit-code -- proto/gen
	@test -z "$$(git status --porcelain -- proto/gen)" || (echo "proto/gen has untracked or changed files: run make generate" && exit 1)
	$(GO) vet ./...
	@out="$$(gofmt -l $$(git ls-files '*.go' | grep -v '/gen/\|/dbsqlc/'))"; test -z "$$out" || (echo "gofmt needed:"; echo "$$out"; exit 1)

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

clean:
	rm -rf bin
