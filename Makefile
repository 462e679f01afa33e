# outbox: make help lists the targets.
GO        ?= go
TESTFLAGS ?=
# MODULES are the module directories go.work lists: the root module and the
# nested ones (broker adapters, ORM integrations), which keep their
# dependencies out of the core's go.mod. PKGS covers them all.
MODULES   := $(shell $(GO) list -m -f '{{.Dir}}' | sed 's|^$(CURDIR)|.|')
PKGS      ?= $(addsuffix /...,$(MODULES))
# SOLO_MODULES are modules kept out of go.work because they need a newer Go
# than the rest (the Kafka tests: franz-go's kfake requires Go 1.26); test
# and vet run each in a workspace of its own (modtool exec: the module and
# the repository's modules it requires), tidy through modtool's proxy.
SOLO_MODULES := ./broker/kafka/kfaketest
# MODTOOL (internal/modtool, a module of its own) keeps the modules
# releasable: the consumer test, tidy without a published tag, release.
MODTOOL = cd internal/modtool && GOWORK=off $(GO) run . -C $(CURDIR)

.DEFAULT_GOAL := help

.PHONY: help
help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {n++; t[n] = $$1; d[n] = $$2; if (length($$1) > w) w = length($$1)} \
		END {for (i = 1; i <= n; i++) printf "  %-" w "s  %s\n", t[i], d[i]}' $(MAKEFILE_LIST)

# testsummary runs go test and ends with one line saying which groups of
# tests (databases, brokers, browser tests, promtool tests, ...) ran and
# which skipped and why (a package whose tests all skipped still prints ok).
# Its own tests run first. It is built, not run with go run, so that a
# failed test run is not followed by go run's own "exit status" line.
RUN_TESTS = @d=$$(mktemp -d) && trap 'rm -rf "$$d"' EXIT && \
	$(GO) test -count=1 ./.ci/testsummary && \
	$(GO) build -o "$$d/testsummary" .ci/testsummary/main.go && \
	echo "$(GO) test $(1)" && "$$d/testsummary" -- $(GO) test $(1)
# RUN_SOLO_TESTS runs go test with flags $(1) in each of SOLO_MODULES.
RUN_SOLO_TESTS = @for m in $(SOLO_MODULES); do echo "(cd $$m && $(GO) test $(1) ./...) in a workspace of its own"; \
	($(MODTOOL) exec $$m -- $(GO) test $(1) ./...) || exit 1; done

.PHONY: test
test: ## Run all tests with -race, about 6 minutes on 2 cores (server tests need the variables of DEVELOPERS.md, else they skip)
	$(call RUN_SOLO_TESTS,-race -count=1 -timeout 30m $(TESTFLAGS))
	$(call RUN_TESTS,-race -count=1 -timeout 30m $(TESTFLAGS) $(PKGS))

.PHONY: test-short
test-short: ## Run the tests without -race
	$(call RUN_SOLO_TESTS,-count=1 $(TESTFLAGS))
	$(call RUN_TESTS,-count=1 $(TESTFLAGS) $(PKGS))

# test-quick leaves out the fault-injection suite (reliability), the
# benchmark harness (bench) and -race, and runs on SQLite only.
QUICK_PKGS = $(shell $(GO) list $(PKGS) | grep -v -e /reliability -e /bench)

.PHONY: test-quick
test-quick: export OUTBOX_POSTGRES_DSN :=
test-quick: export OUTBOX_MYSQL_DSN :=
test-quick: ## The tests minus the fault-injection suite, on SQLite only, without -race (about 1 minute on 2 cores)
	$(call RUN_TESTS,-count=1 $(TESTFLAGS) $(QUICK_PKGS))

.PHONY: test-dbs
test-dbs: ## Run all tests against the local PostgreSQL, MariaDB, NATS and RabbitMQ (fails if they are down)
	OUTBOX_POSTGRES_DSN='postgres://postgres@127.0.0.1:5432/test?sslmode=disable' \
	OUTBOX_MYSQL_DSN='root@tcp(127.0.0.1:3306)/test?parseTime=true&loc=UTC' \
	OUTBOX_NATS_URL='nats://127.0.0.1:4222' \
	OUTBOX_AMQP_URL='amqp://guest:guest@127.0.0.1:5672/' \
	OUTBOX_REQUIRE_DBS=1 $(MAKE) test

.PHONY: demo
demo: ## Run the demo (SQLite in a temp dir, no server needed)
	$(GO) run ./samples/demo

.PHONY: samples
samples: ## Build every sample under samples/, the nested sample modules included (a compile check; go test runs them)
	$(GO) build ./samples/... $(addsuffix /...,$(filter ./samples/%,$(MODULES)))

# go mod tidy ignores go.work: in a nested module it would fetch the root at
# the version required, untagged yet. modtool serves the working tree at
# that version from a file proxy and keeps the go.sum lines of the
# repository's own modules out (go.work serves them).
.PHONY: tidy
tidy: ## go mod tidy in every module, through a file proxy of the working tree
	@$(MODTOOL) tidy

.PHONY: tidy-check
tidy-check: ## Fail when a go.mod or go.sum is not tidy (make tidy fixes it); changes nothing
	@$(MODTOOL) tidy -diff

.PHONY: consumer-test
consumer-test: ## Fetch and build every published module as a user does: file proxy of the working tree, scratch module, GOWORK=off, no replace (~2 min)
	@$(MODTOOL) consumer

.PHONY: proxy
proxy: ## Serve this checkout as a module proxy (.modproxy/, every module at the commit's pseudo-version) for a module of your own: see README
	@$(MODTOOL) proxy -version checkout -o $(CURDIR)/.modproxy

.PHONY: release
release: ## Set every cross-module require (and go.work's replaces) to VERSION=vX.Y.Z and print the tags to push, root first
	@if [ -z "$(VERSION)" ]; then echo "usage: make release VERSION=vX.Y.Z"; exit 2; fi
	@$(MODTOOL) release $(VERSION)

.PHONY: screenshots
screenshots: ## Refresh docs/images/console-*.png: the browser test drives the console in headless Chromium on SQLite
	cd console/browsertest && OUTBOX_SCREENSHOTS=$(CURDIR)/docs/images $(GO) test -count=1 -run 'TestConsoleInBrowser/sqlite' .

.PHONY: httpservice
httpservice: ## Run samples/httpservice on the local PostgreSQL; ARGS='-addr :9000 -dsn ... -nats nats://127.0.0.1:4222' to change; Ctrl-C stops it
	@# Built, then run: go run exits 1 when interrupted, even after the
	@# program it runs has shut down cleanly and exited 0.
	@d=$$(mktemp -d) && trap 'rm -rf "$$d"' EXIT && \
	$(GO) build -o "$$d/httpservice" ./samples/httpservice && "$$d/httpservice" $(ARGS)

.PHONY: docs-check
docs-check: ## Check README.md, docs/ and Go comments: no result dated by work item, every link and anchor resolves, the marked Go programs build and pass their tests
	$(GO) test -count=1 ./internal/docscheck

.PHONY: vet
vet: ## go vet (every module, and the test runner in .ci, which ./... skips)
	$(GO) vet $(PKGS)
	@for m in $(SOLO_MODULES); do echo "(cd $$m && $(GO) vet ./...) in a workspace of its own"; ($(MODTOOL) exec $$m -- $(GO) vet ./...) || exit 1; done
	$(GO) vet ./.ci/testsummary
	$(GO) vet .ci/apilist/main.go

# The public API of every package of every module, one file per package
# under api/ (.ci/apilist/main.go says what is listed). Committed, so that
# every change to the public surface shows in review; .ci/run fails when
# the files differ from the code.
API_DIR := api
# (SOLO_MODULES are left out: kfaketest is tests only, with no API.)
APILIST  = $(GO) run .ci/apilist/main.go

.PHONY: api
api: ## Write the public API of every package to api/ (commit the change with the code that made it)
	$(APILIST) $(API_DIR)

.PHONY: api-check
api-check: ## Fail when api/ differs from the public API of the code (then: make api, review, commit)
	@d=$$(mktemp -d) && trap 'rm -rf "$$d"' EXIT && $(APILIST) "$$d" && \
	if ! diff -ru -x '.*' $(API_DIR) "$$d"; then \
		echo "The public API differs from $(API_DIR)/ (lines with - are committed, + are the code's): if the change is intended, run make api and commit $(API_DIR)/."; exit 1; \
	fi

.PHONY: fmt
fmt: ## gofmt -w
	gofmt -w $$(git ls-files '*.go')

.PHONY: lint
lint: vet ## gofmt check, go vet, and golangci-lint when installed
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@if command -v golangci-lint >/dev/null; then golangci-lint run; else echo "golangci-lint not installed; ran gofmt and go vet only"; fi

CHAOS_FUZZTIME ?= 60s
CHAOS_FUZZ ?= core:FuzzNewEnvelope core:FuzzEnvelopeHeaders core:FuzzRestoreEnvelope core:FuzzCheckText \
	store/internal/sqlstore:FuzzParseTableName store/internal/sqlstore:FuzzDecodeRow store/internal/sqlstore:FuzzScanTime \
	store/internal/sqlstore:FuzzDecodeHeaders

# CHAOS_RUN narrows the suite (a go test -run pattern) and CHAOS_FUZZ= skips
# the fuzzing, e.g. the crash and long-outage runs alone:
#   make chaos CHAOS_RUN='TestCrash|TestOutageLongerThanLease' CHAOS_FUZZ=
CHAOS_RUN ?= .

# The lease and write-back tests most sensitive to timing, repeated under
# -race: a reclaim race shows up in a few runs of twenty, not in one.
STRESS_RUN   ?= ^(TestLeaseExpirySameInstance|TestLeaseExpirySlowListener|TestReclaimWhileFinishing|TestLeaseRenewal.*|TestWriteBack.*|TestLeaseLost.*)$$
STRESS_COUNT ?= 20

.PHONY: stress
stress: ## Lease and write-back tests, STRESS_COUNT (20) times each under -race, on the local PostgreSQL/MariaDB and SQLite
	OUTBOX_POSTGRES_DSN='postgres://postgres@127.0.0.1:5432/test?sslmode=disable' \
	OUTBOX_MYSQL_DSN='root@tcp(127.0.0.1:3306)/test?parseTime=true&loc=UTC' \
	OUTBOX_REQUIRE_DBS=1 $(GO) test -race -count=$(STRESS_COUNT) -run '$(STRESS_RUN)' -timeout 60m ./reliability

.PHONY: chaos
chaos: ## Long fault-injection suite on the local PostgreSQL/MariaDB (CHAOS_RUN narrows it), then each fuzz target for CHAOS_FUZZTIME
	OUTBOX_POSTGRES_DSN='postgres://postgres@127.0.0.1:5432/test?sslmode=disable' \
	OUTBOX_MYSQL_DSN='root@tcp(127.0.0.1:3306)/test?parseTime=true&loc=UTC' \
	OUTBOX_REQUIRE_DBS=1 OUTBOX_CHAOS=long $(GO) test -count=1 -run '$(CHAOS_RUN)' -timeout 60m -v ./reliability
	@for t in $(CHAOS_FUZZ); do echo "== $${t#*:}"; \
		$(GO) test -run '^$$' -fuzz "^$${t#*:}\$$" -fuzztime $(CHAOS_FUZZTIME) ./$${t%%:*} || exit 1; done

.PHONY: chaos-ordered
chaos-ordered: ## The ordered kill run alone (TestCrashOrderedKills, long size): SIGKILLs every ~2 s, 20,000 events over 200 keys, ordered beside unordered, on the local PostgreSQL and MariaDB
	$(MAKE) --no-print-directory chaos CHAOS_RUN='^TestCrashOrderedKills$$' CHAOS_FUZZ=

.PHONY: bench-ordered
bench-ordered: ## Benchmark W5 alone: ordered keys across two processes against the same transactions unordered, on PostgreSQL and MariaDB (BENCHFLAGS adds flags, e.g. -w5-sample 20ms)
	$(MAKE) --no-print-directory bench BENCH_BROKER=0 BENCHFLAGS='-db postgres,mysql -w w5 $(BENCHFLAGS)'

.PHONY: broker-cluster
broker-cluster: ## 3-node JetStream cluster on loopback ports (nats-server), R3 stream, stream leader killed during a drain (~1 minute)
	OUTBOX_BROKER_CLUSTER=1 OUTBOX_REQUIRE_DBS=1 $(GO) test -count=1 -v -run '^TestClusterNodeKilledDuringDrain$$' ./broker/jetstream

.PHONY: bench-wake
bench-wake: ## Benchmark W4, cross-instance wake-up (three processes, events without a hot path at 1,000/s)
	$(MAKE) bench BENCHFLAGS='-w w4 $(BENCHFLAGS)'

.PHONY: bench
bench: ## Benchmarks W1-W3 and W5 (ordered keys, two processes) on SQLite, and on PostgreSQL/MariaDB when their DSNs are set (BENCHFLAGS=-h lists the flags), then bench-broker (BENCH_BROKER=0 skips it)
	OUTBOX_POSTGRES_DSN=$${OUTBOX_POSTGRES_DSN-postgres://postgres@127.0.0.1:5432/test?sslmode=disable} \
	OUTBOX_MYSQL_DSN=$${OUTBOX_MYSQL_DSN-root@tcp(127.0.0.1:3306)/test?parseTime=true&loc=UTC} \
	$(GO) run ./bench $(BENCHFLAGS)
	@if [ "$(BENCH_BROKER)" != "0" ]; then $(MAKE) --no-print-directory bench-broker; fi

.PHONY: soak
soak: ## Soak: SOAK_EVENTS (10,000,000) events through W1 (SOAK_PER_TX, 10, per transaction) then W2 on PostgreSQL and MariaDB, a line a minute (about an hour each; SOAKFLAGS adds bench flags)
	OUTBOX_POSTGRES_DSN=$${OUTBOX_POSTGRES_DSN-postgres://postgres@127.0.0.1:5432/test?sslmode=disable} \
	OUTBOX_MYSQL_DSN=$${OUTBOX_MYSQL_DSN-root@tcp(127.0.0.1:3306)/test?parseTime=true&loc=UTC} \
	$(GO) run ./bench -w soak -db postgres,mysql -soak-events $${SOAK_EVENTS-10000000} -soak-per-tx $${SOAK_PER_TX-10} -timeout 6h $(SOAKFLAGS)

DRAIN_EVENTS ?= 10000000
DRAIN_FLAGS  ?=

.PHONY: bench-drain
bench-drain: ## The long drain: DRAIN_EVENTS (10,000,000) pending rows drained by one instance on PostgreSQL (autovacuum off for the table) and MariaDB, the rate every 5 s and end/start; hours at the default size
	OUTBOX_POSTGRES_DSN=$${OUTBOX_POSTGRES_DSN-postgres://postgres@127.0.0.1:5432/test?sslmode=disable} \
	OUTBOX_MYSQL_DSN=$${OUTBOX_MYSQL_DSN-root@tcp(127.0.0.1:3306)/test?parseTime=true&loc=UTC} \
	$(GO) run ./bench -db postgres,mysql -w w2 -no-raw -no-autovacuum -w2-events $(DRAIN_EVENTS) -timeout 180m $(DRAIN_FLAGS)

.PHONY: bench-broker
bench-broker: ## Benchmark "outbox to broker": backlog drain into JetStream and RabbitMQ vs a raw async publish loop, commit-to-ack latency (BROKERBENCHFLAGS=-h lists the flags)
	OUTBOX_NATS_URL=$${OUTBOX_NATS_URL-nats://127.0.0.1:4222} \
	OUTBOX_AMQP_URL=$${OUTBOX_AMQP_URL-amqp://guest:guest@127.0.0.1:5672/} \
	OUTBOX_POSTGRES_DSN=$${OUTBOX_POSTGRES_DSN-postgres://postgres@127.0.0.1:5432/test?sslmode=disable} \
	$(GO) run ./bench/brokerbench $(BROKERBENCHFLAGS)

.PHONY: bench-compare
bench-compare: ## Compare with River and watermill-sql (and a hand-written SQL outbox) on the local PostgreSQL and MariaDB, W1 and W2 (COMPAREFLAGS=-h lists the flags; the documented comparison: COMPAREFLAGS='-w1-events 20000 -w2-events 100000 -rounds 3')
	OUTBOX_POSTGRES_DSN=$${OUTBOX_POSTGRES_DSN-postgres://postgres@127.0.0.1:5432/test?sslmode=disable} \
	OUTBOX_MYSQL_DSN=$${OUTBOX_MYSQL_DSN-root@tcp(127.0.0.1:3306)/test?parseTime=true&loc=UTC} \
	$(GO) run ./bench/compare $(COMPAREFLAGS)
