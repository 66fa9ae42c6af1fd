# Targets mirror .ci/run; `make ci` runs exactly what CI runs.
GO ?= go
BIN ?= bin/varplane

.PHONY: run build test race lint ci bench bench-quick proto screenshots

run: ## run the server on the embedded default file store
	$(GO) run ./cmd/varplane serve

build: ## build the varplane binary into bin/
	$(GO) build -o $(BIN) ./cmd/varplane

test: ## the README's test command
	$(GO) test ./...

race: ## the race detector on every package with goroutines of its own (as .ci/run)
	$(GO) test -race -count=1 $$(for p in . ./internal/... ./store/... ./push/... ./rpc/... ./httpapi/... ./client/... ./config/... ./instance/... ./control/... ./access/... ./retention/... ./ui/...; do $(GO) list $$p 2>/dev/null; done)

lint: ## gofmt, go vet, staticcheck
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	@if command -v staticcheck >/dev/null 2>&1; then staticcheck ./...; \
	elif [ -x "$$($(GO) env GOPATH)/bin/staticcheck" ]; then "$$($(GO) env GOPATH)/bin/staticcheck" ./...; \
	else echo "staticcheck not installed: go install honnef.co/go/tools/cmd/staticcheck@v0.8.2"; fi

ci: ## everything CI checks
	.ci/run

bench: ## the side-by-side harness (etcd, net/http ceiling, Redis, PostgreSQL): about 13 minutes; writes docs/benchmarks.md and bench/results.json
	cd bench && $(GO) run . -profile

bench-quick: ## every scenario shortened: under 2 minutes
	cd bench && $(GO) run . -quick

proto: ## regenerate rpc/gen from proto/ (buf runs from its own tools module; the first build takes a few minutes)
	cd proto && $(GO) tool -modfile=../tools/buf/go.mod buf lint && $(GO) tool -modfile=../tools/buf/go.mod buf generate
	cd proto && sha256sum $$(find . -name '*.proto' | LC_ALL=C sort) > ../rpc/gen/proto.sha256

screenshots: ## regenerate the console's screenshots in docs/screenshots/ from its browser tests (needs chromium)
	mkdir -p docs/screenshots
	VARPLANE_SCREENSHOTS=$(CURDIR)/docs/screenshots VARPLANE_REQUIRE_SERVICES=1 $(GO) test ./ui -run Browser -count=1
