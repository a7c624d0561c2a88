# sandpit: make build | test | lint | image | base-image | quickstart
GO        ?= go
BIN       ?= bin
VERSION   ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -s -w -X main.version=$(VERSION)
# -trimpath makes the binaries the same wherever they are built; CI builds without it, so that
# the build shares Go's cache with the tests' own builds of sandpit and sandpit-executor.
BUILD_FLAGS ?= -trimpath
# The base of the sandbox image. Without a container registry: make base-image, then
# BASE_IMAGE=sandpit-base:bookworm-2 (the quickstart does both).
BASE_IMAGE ?=
TEST_FLAGS ?= -race -count=1 -timeout 50m

FUZZ_TIME ?= 10s

.PHONY: build test test-flags fuzz lint image base-image quickstart clean

build:
	CGO_ENABLED=0 GOOS=linux $(GO) build $(BUILD_FLAGS) -ldflags '$(LDFLAGS)' -o $(BIN)/sandpit-executor ./cmd/sandpit-executor
	$(GO) build $(BUILD_FLAGS) -ldflags '$(LDFLAGS)' -o $(BIN)/sandpit ./cmd/sandpit

# The whole suite. Tests that need the Docker engine skip without one unless
# SANDPIT_REQUIRE_DOCKER=1; executor tests that switch uids need root. The packages whose tests
# take minutes are named first: go test starts the test binaries in the order of its list, -p
# at a time, and in the alphabet's order the two longest met at the end, one lane idle. The
# order pairs them in two lanes of about equal length (kubernetes then docker, app then bench)
# so that the two gVisor suites (the Kubernetes one's and Docker's runsc) do not run at once:
# together on 2 CPUs they can starve each other (4 December, on a fresh machine: the
# Kubernetes package took 2805 s, not about 700, and runs there passed their timeouts).
SLOW_PACKAGES := ./internal/runtime/kubernetes ./internal/app ./internal/runtime/docker ./internal/bench
test:
	$(GO) test $(TEST_FLAGS) $(SLOW_PACKAGES) ./...

# The flags of make test, for a caller that adds its own (.ci/run).
test-flags:
	@echo $(TEST_FLAGS)

# Every fuzz target for FUZZ_TIME each (their seed corpora also run with `make test`).
fuzz:
	GO=$(GO) scripts/fuzz-one.sh FuzzParse ./internal/requirement $(FUZZ_TIME)
	GO=$(GO) scripts/fuzz-one.sh FuzzParse ./internal/schedule $(FUZZ_TIME)
	GO=$(GO) scripts/fuzz-one.sh FuzzReceive ./internal/protocol $(FUZZ_TIME)
	GO=$(GO) scripts/fuzz-one.sh FuzzCapture ./internal/executor $(FUZZ_TIME)
	GO=$(GO) scripts/fuzz-one.sh FuzzReadTarget ./internal/executor $(FUZZ_TIME)
	GO=$(GO) scripts/fuzz-one.sh FuzzParseRule ./internal/egress $(FUZZ_TIME)
	GO=$(GO) scripts/fuzz-one.sh FuzzCheckAddress ./internal/egress $(FUZZ_TIME)
	GO=$(GO) scripts/fuzz-one.sh FuzzDecodeExecuteBody ./internal/httpapi $(FUZZ_TIME)
	GO=$(GO) scripts/fuzz-one.sh FuzzKnowledgeImport ./internal/httpapi $(FUZZ_TIME) -fuzzminimizetime 5s
	GO=$(GO) scripts/fuzz-one.sh FuzzToolArguments ./internal/mcpserver $(FUZZ_TIME)
	GO=$(GO) scripts/fuzz-one.sh FuzzANSISpans ./internal/console $(FUZZ_TIME)

# vet, gofmt, and go.mod as `go mod tidy` leaves it (-diff changes nothing; it prints what tidy
# would change and fails).
lint:
	$(GO) vet ./...
	@$(GO) mod tidy -diff || { echo "go.mod or go.sum is not tidy: run go mod tidy"; exit 1; }
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

image: build
	$(BIN)/sandpit image build $(if $(BASE_IMAGE),--base-image $(BASE_IMAGE))

base-image:
	scripts/offline-base-image.sh

quickstart:
	scripts/quickstart.sh

clean:
	rm -rf $(BIN)
