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
TEST_FLAGS ?= -count=1 -timeout 50m
# The race detector, for every package but the container lanes' (below).
RACE_FLAGS ?= -race

FUZZ_TIME ?= 10s

.PHONY: build test test-flags race-packages fuzz lint image base-image quickstart clean

build:
	CGO_ENABLED=0 GOOS=linux $(GO) build $(BUILD_FLAGS) -ldflags '$(LDFLAGS)' -o $(BIN)/sandpit-executor ./cmd/sandpit-executor
	$(GO) build $(BUILD_FLAGS) -ldflags '$(LDFLAGS)' -o $(BIN)/sandpit ./cmd/sandpit

# The whole suite. Tests that need the Docker engine skip without one unless
# SANDPIT_REQUIRE_DOCKER=1; executor tests that switch uids need root.
#
# Three lanes at once, on the machine kind's 2 CPUs. The race detector's price is paid by every
# line of Go, and its finds are in the daemon's own packages (engine, session, the APIs, the
# proxy, the store...), which keep it. The packages that wire the whole daemon together and
# mostly wait on containers and pods (interpreters, gVisor, the cluster) run without it: the
# runtimes, app, bench, the CLI and the cluster's test helper. That also spares CI a race build
# of client-go and moby. Lane A is the two gVisor suites, one after the other (the Kubernetes
# package's and Docker's runsc: together on 2 CPUs they starve each other; 4 December, on a
# fresh machine, the Kubernetes package took 2805 s, not about 700, and runs passed their
# timeouts). Lane B is the CLI's packages, every other package with -race (go test's -p of them
# at a time), then app and the cluster's test helper. Lane C is the bench, which mostly waits
# (for idle boxes, pods, daemons): beside the other two it takes the CPU they leave, where at
# the end of the lane free first it added its 336 s to the run (8 December, a fresh run on the
# fast kind: lanes A and B about 1500 s each with it). The packages that need a Kubernetes
# cluster come last in their lane (LANE_A_LAST, LANE_B_LAST; the bench is one), so that
# .ci/run can start the lanes while the cluster still builds. A lane's failure fails make test
# once all three have ended.
MODULE      := github.com/sandpit-dev/sandpit
LANE_A      := internal/runtime/docker
LANE_A_LAST := internal/runtime/kubernetes
LANE_B      := internal/cli cmd/sandpit
LANE_B_LAST := internal/app internal/testenv/kubetest
LANE_C      := internal/bench
# Every other package (evaluated where it is used).
RACE_PACKAGES = $(shell $(GO) list ./... | grep -vxF $(addprefix -e $(MODULE)/,$(LANE_A) $(LANE_A_LAST) $(LANE_B) $(LANE_B_LAST) $(LANE_C)))
test:
	@status=0; \
	( s=0; $(GO) test -p 1 $(TEST_FLAGS) $(addprefix ./,$(LANE_A)) || s=1; \
	  $(GO) test -p 1 $(TEST_FLAGS) $(addprefix ./,$(LANE_A_LAST)) || s=1; exit $$s ) & a=$$!; \
	$(GO) test -p 1 $(TEST_FLAGS) $(addprefix ./,$(LANE_C)) & c=$$!; \
	$(GO) test -p 1 $(TEST_FLAGS) $(addprefix ./,$(LANE_B)) || status=1; \
	$(GO) test $(RACE_FLAGS) $(TEST_FLAGS) $(RACE_PACKAGES) || status=1; \
	$(GO) test -p 1 $(TEST_FLAGS) $(addprefix ./,$(LANE_B_LAST)) || status=1; \
	wait $$a || status=1; wait $$c || status=1; exit $$status

# The flags of make test, for a caller that adds its own (.ci/run).
test-flags:
	@echo $(TEST_FLAGS)

# The packages make test runs with the race detector (all but the lanes'), for .ci/run's
# build of them ahead of the tests.
race-packages:
	@echo $(RACE_PACKAGES)

# Every fuzz target for FUZZ_TIME each (their seed corpora also run with `make test`): all of
# them, a failure failing the whole once the others have run.
FUZZ_TARGETS := FuzzParse:./internal/requirement FuzzParse:./internal/schedule FuzzReceive:./internal/protocol \
	FuzzCapture:./internal/executor FuzzReadTarget:./internal/executor FuzzParseRule:./internal/egress \
	FuzzCheckAddress:./internal/egress FuzzDecodeExecuteBody:./internal/httpapi \
	FuzzKnowledgeImport:./internal/httpapi:-fuzzminimizetime=5s FuzzToolArguments:./internal/mcpserver \
	FuzzANSISpans:./internal/console
fuzz:
	@status=0; for t in $(FUZZ_TARGETS); do \
	  set -- $$(echo "$$t" | tr : ' '); echo "fuzz: $$1 $$2 for $(FUZZ_TIME)"; \
	  GO=$(GO) scripts/fuzz-one.sh "$$1" "$$2" $(FUZZ_TIME) $$3 || { status=1; echo "fuzz: $$1 $$2 FAILED"; }; \
	done; exit $$status

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
