# detour: the two commands of the README's quick start are `make demo` and
# `make test`. Both install what they need through scripts/install-deps.sh.

# Go: scripts/install-deps.sh installs a toolchain new enough for go.mod in
# /usr/local/go when the PATH has none, so that directory comes first on the
# PATH of every recipe (the scripts call go too). A go on the PATH is used
# when /usr/local/go does not exist.
export PATH := /usr/local/go/bin:$(PATH)
GO ?= go
# Two binaries: detour (the gateway's daemon and the operator's CLI) and
# detour-lab (the testbed, the WAN emulator and the experiments), which
# runs the detour beside it as each site's agent.
BIN := bin/detour
LAB_BIN := bin/detour-lab
VERSION := $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/detour-overlay/detour/internal/cli/command.Version=$(VERSION)

.PHONY: all build deps demo test test-unit test-netns bench fuzz vet clean deb

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/detour
	$(GO) build -ldflags "$(LDFLAGS)" -o $(LAB_BIN) ./cmd/detour-lab

deps:
	bash scripts/install-deps.sh

# The headline demo: geo-replicated ZooKeeper on the lanman2017 WAN, with
# and without detour.
demo: deps build
	bash scripts/demo.sh

# The recipes use pipefail: go test's status must survive its filter.
SHELL := /bin/bash

# PROGRESS filters `go test -json`: each test as it passes, the tests still
# running every 30 s, the whole output of a failed test, and go test's own
# "ok"/"FAIL" package lines.
PROGRESS = $(GO) run ./internal/devtools/testprogress

# The namespace tests run the binaries make build made.
NETNS_ENV = DETOUR_BIN=$(CURDIR)/$(BIN) DETOUR_LAB_BIN=$(CURDIR)/$(LAB_BIN)

# Unit tests (pure logic, in-process multi-site scenarios) and then the tests
# that run the real thing in network namespaces (need root).
test: deps build vet
	set -o pipefail; $(GO) test -json -count=1 ./... 2>&1 | $(PROGRESS)
	set -o pipefail; $(NETNS_ENV) $(GO) test -json -count=1 -p 1 -timeout 18m -tags netns ./test/... 2>&1 | $(PROGRESS) || \
		{ $(NETNS_ENV) $(GO) test -count=1 -run '^$$' -tags netns ./test/... >/dev/null; exit 1; }

test-unit:
	$(GO) test -count=1 ./...

# The Debian package of the gateway (docs/operations.md): bin/detour_*.deb.
deb:
	bash scripts/deb.sh bin

# Long measurements; not run in CI.
bench: deps build
	$(GO) test -run '^$$' -bench . -benchmem ./...
	bash scripts/bench.sh

# A short run of every fuzz target.
fuzz:
	bash scripts/fuzz.sh

# go vet, and gofmt: a file gofmt would change fails the build.
vet:
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
		if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

clean:
	rm -rf bin results
