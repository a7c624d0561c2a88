# sandpit: make build | test | lint | image | base-image | quickstart
GO        ?= go
BIN       ?= bin
VERSION   ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -s -w -X main.version=$(VERSION)
# The base of the sandbox image. Without a container registry: make base-image, then
# BASE_IMAGE=sandpit-base:bookworm (the quickstart does both).
BASE_IMAGE ?=
TEST_FLAGS ?= -race -count=1 -timeout 30m

.PHONY: build test lint image base-image quickstart clean

build:
	CGO_ENABLED=0 GOOS=linux $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/sandpit-executor ./cmd/sandpit-executor
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/sandpit ./cmd/sandpit

# The whole suite. Tests that need the Docker engine skip without one unless
# SANDPIT_REQUIRE_DOCKER=1; executor tests that switch uids need root.
test:
	$(GO) test $(TEST_FLAGS) ./...

lint:
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

image: build
	$(BIN)/sandpit image build $(if $(BASE_IMAGE),--base-image $(BASE_IMAGE))

base-image:
	scripts/offline-base-image.sh

quickstart:
	scripts/quickstart.sh

clean:
	rm -rf $(BIN)
