# outbox: make help lists the targets.
GO        ?= go
TESTFLAGS ?=
PKGS      ?= ./...

.DEFAULT_GOAL := help

.PHONY: help
help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: test
test: ## Run all tests with -race (PostgreSQL/MySQL tests need OUTBOX_POSTGRES_DSN / OUTBOX_MYSQL_DSN, else they skip)
	$(GO) test -race -count=1 $(TESTFLAGS) $(PKGS)

.PHONY: test-short
test-short: ## Run the tests without -race
	$(GO) test -count=1 $(TESTFLAGS) $(PKGS)

.PHONY: test-dbs
test-dbs: ## Run all tests against the local PostgreSQL and MariaDB (fails if they are down)
	OUTBOX_POSTGRES_DSN='postgres://postgres@127.0.0.1:5432/test?sslmode=disable' \
	OUTBOX_MYSQL_DSN='root@tcp(127.0.0.1:3306)/test?parseTime=true&loc=UTC' \
	OUTBOX_REQUIRE_DBS=1 $(MAKE) test

.PHONY: demo
demo: ## Run the demo (SQLite in a temp dir, no server needed)
	$(GO) run ./samples/demo

.PHONY: samples
samples: ## Build every sample under samples/ (a compile check; go test runs them)
	$(GO) build ./samples/...

.PHONY: httpservice
httpservice: ## Run samples/httpservice on the local PostgreSQL; ARGS='-addr :9000 -dsn ...' to change
	$(GO) run ./samples/httpservice $(ARGS)

.PHONY: vet
vet: ## go vet
	$(GO) vet $(PKGS)

.PHONY: fmt
fmt: ## gofmt -w
	gofmt -w $$(git ls-files '*.go')

.PHONY: lint
lint: vet ## gofmt check, go vet, and golangci-lint when installed
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@if command -v golangci-lint >/dev/null; then golangci-lint run; else echo "golangci-lint not installed; ran gofmt and go vet only"; fi

CHAOS_FUZZTIME ?= 60s
CHAOS_FUZZ = core:FuzzNewEnvelope core:FuzzEnvelopeHeaders core:FuzzRestoreEnvelope \
	store/internal/sqlstore:FuzzParseTableName store/internal/sqlstore:FuzzDecodeRow store/internal/sqlstore:FuzzScanTime

.PHONY: chaos
chaos: ## Long fault-injection suite on the local PostgreSQL/MariaDB, then each fuzz target for CHAOS_FUZZTIME
	OUTBOX_POSTGRES_DSN='postgres://postgres@127.0.0.1:5432/test?sslmode=disable' \
	OUTBOX_MYSQL_DSN='root@tcp(127.0.0.1:3306)/test?parseTime=true&loc=UTC' \
	OUTBOX_REQUIRE_DBS=1 OUTBOX_CHAOS=long $(GO) test -count=1 -run . -timeout 60m -v ./reliability
	@for t in $(CHAOS_FUZZ); do echo "== $${t#*:}"; \
		$(GO) test -run '^$$' -fuzz "^$${t#*:}\$$" -fuzztime $(CHAOS_FUZZTIME) ./$${t%%:*} || exit 1; done

.PHONY: bench
bench: ## Benchmarks W1-W3 on SQLite, and on PostgreSQL/MariaDB when their DSNs are set (BENCHFLAGS=-h lists the flags)
	OUTBOX_POSTGRES_DSN=$${OUTBOX_POSTGRES_DSN-postgres://postgres@127.0.0.1:5432/test?sslmode=disable} \
	OUTBOX_MYSQL_DSN=$${OUTBOX_MYSQL_DSN-root@tcp(127.0.0.1:3306)/test?parseTime=true&loc=UTC} \
	$(GO) run ./bench $(BENCHFLAGS)
