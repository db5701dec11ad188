# loopgate — one Makefile, also run by CI (.ci/run calls `make test`).
GO        ?= go
PKGS      ?= ./...
FUZZTIME  ?= 30s
# Each fuzz target runs briefly in `make test` and for FUZZTIME in `make fuzz`.
FUZZ_TARGETS = \
	./events:FuzzParseWorkSubject \
	./events:FuzzDecodeAgreesWithEncodingJSON \
	./events:FuzzEncodeAgreesWithEncodingJSON \
	./guard:FuzzCuesNeverHideAFlag \
	./tools:FuzzCanonical \
	./tools:FuzzBound \
	./tools:FuzzValidate \
	./worker:FuzzDecodeTask \
	./worker:FuzzParseDecision \
	./worker:FuzzFastDecisionAgreesWithTheSchema \
	./worker:FuzzParseApproval \
	./worker:FuzzParseCancel \
	./redact:FuzzJSONStaysValid \
	./redact:FuzzCuesNeverHideAMatch \
	./redact:FuzzQuietIsExact \
	./redact:FuzzPlainlyQuietIsExact \
	./redact:FuzzNewCuesNeverHideAMatch \
	./redact:FuzzGeneratedPhoneNumbersAndIBANsAreRedacted

.PHONY: help build test lint vet fmt-check unit compose-check fuzz-smoke fuzz bench bench-natscli soak demo clean

help: ## show this help
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

build: ## build bin/loopgate
	$(GO) build -o bin/loopgate ./cmd/loopgate

test: lint unit compose-check fuzz-smoke ## everything CI checks: formatting, vet, race tests, compose.yaml, fuzz smoke

lint: fmt-check vet ## gofmt and go vet

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

# Packages that link the model providers' SDKs (openai-go, anthropic-sdk-go:
# ~170k lines each) are tested without -race: their race build alone takes
# minutes on a 2-core machine. Everything that runs loops is raced.
SDK_PKGS  = ./cli ./providers ./cmd/loopgate
# Most tests wait (ack deadlines, elections, leases) far more than they
# compute: the worker package under -race used a fifth of the two cores
# at go test's default of GOMAXPROCS parallel tests. Six at a time ran it
# in 57 s rather than 139 s, with the same tests passing.
TEST_PARALLEL ?= 6
# Packages with a test the race build leaves out (a data race inside
# nats-server itself: see internal/follow/outage_test.go), run again
# without -race.
NORACE_PKGS = ./internal/follow
RACE_PKGS = $(shell $(GO) list ./... | grep -v -e /cli$$ -e /providers$$ -e /cmd/loopgate$$)

unit: ## race-enabled tests with shuffled order (SDK packages without -race); the worker again with batched appends, and with group commit
	$(GO) test -race -shuffle=on -parallel $(TEST_PARALLEL) -timeout 9m -count=1 $(RACE_PKGS)
	$(GO) test -shuffle=on -parallel $(TEST_PARALLEL) -timeout 9m -count=1 $(SDK_PKGS) $(NORACE_PKGS)
	LOOPGATE_TEST_BATCH=1 $(GO) test -race -shuffle=on -parallel $(TEST_PARALLEL) -timeout 5m -count=1 ./worker
	LOOPGATE_TEST_GROUP=1 $(GO) test -race -shuffle=on -parallel $(TEST_PARALLEL) -timeout 5m -count=1 ./worker

compose-check: ## validate compose.yaml as docker compose would (no engine needed)
	cd deploy/composecheck && $(GO) test -count=1 ./...

# Both run internal/fuzzrun/fuzz.sh: it tries a target once more only when
# go test's own end-of-fuzztime race failed it (see the script).
fuzz-smoke: ## run every fuzz target for 3s
	@sh internal/fuzzrun/fuzz.sh "$(GO)" 3s $(FUZZ_TARGETS)

fuzz: ## run every fuzz target for FUZZTIME (default 30s; minimizing a new input at most 5s)
	@sh internal/fuzzrun/fuzz.sh "$(GO)" $(FUZZTIME) $(FUZZ_TARGETS)

bench: ## benchmarks (not tests): go test -bench
	$(GO) test -run='^$$' -bench=. -benchmem -timeout 30m ./...

bench-natscli: ## raw JetStream as the nats CLI measures it (nats bench js pub sync), both fsync settings
	GO="$(GO)" sh bench/natscli.sh

soak: ## fault tests with real processes: crash points, cluster node and worker kills, serve kills (slow; not in make test)
	$(GO) test -tags soak -count=1 -timeout 30m -v ./soak

demo: ## run the CityOps happy path
	$(GO) run ./cmd/loopgate demo

clean:
	rm -rf bin
