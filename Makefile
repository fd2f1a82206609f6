# lapse — common tasks. `make test` is the README's test command and what CI runs.

# Integration suites run against local servers; override to point elsewhere.
# A suite whose variable is empty is skipped (CI fails on any skip).
LAPSE_TEST_POSTGRES ?= postgres://postgres@127.0.0.1:5432/test?sslmode=disable
LAPSE_TEST_MYSQL    ?= mysql://root@127.0.0.1:3306/test
LAPSE_TEST_REDIS    ?= redis://127.0.0.1:6379/0
# The Redis Cluster suite needs a cluster: `bash scripts/redis-cluster.sh start /tmp/lapse-redis-cluster`
# (what .ci/run does), then LAPSE_TEST_REDIS_CLUSTER=redis-cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002
LAPSE_TEST_REDIS_CLUSTER ?=
LAPSE_TEST_AMQP     ?= amqp://guest:guest@127.0.0.1:5672/
LAPSE_TEST_NATS     ?= nats://127.0.0.1:4222
export LAPSE_TEST_POSTGRES LAPSE_TEST_MYSQL LAPSE_TEST_REDIS LAPSE_TEST_REDIS_CLUSTER LAPSE_TEST_AMQP LAPSE_TEST_NATS

GOTESTFLAGS ?=

.PHONY: test test-unit check build run bench lint fuzz check-deploy release-snapshot check-release image check-image

## test: every test, with the race detector, including the integration suites (the lapse
## processes cmd/lapse's end-to-end tests start are built without it: LAPSE_TEST_RACE_BINARY=1 races them too)
test:
	go test -race -count=1 -timeout 30m $(GOTESTFLAGS) ./...

## test-unit: only what needs no server (SQLite and in-process timers)
test-unit:
	LAPSE_TEST_POSTGRES= LAPSE_TEST_MYSQL= LAPSE_TEST_REDIS= LAPSE_TEST_REDIS_CLUSTER= LAPSE_TEST_AMQP= LAPSE_TEST_NATS= go test -race -count=1 -timeout 30m $(GOTESTFLAGS) ./...

## check: the fast one, no server needed: gofmt, go vet, staticcheck, then the tests that need none
check: lint test-unit

## build: bin/lapse, naming its commit (`bin/lapse --version`) even where GOFLAGS holds -buildvcs=false
build:
	go build -buildvcs=auto -ldflags "-X main.commit=$$(git rev-parse HEAD 2>/dev/null) -X main.date=$$(git log -1 --format=%cI 2>/dev/null)" -o bin/lapse ./cmd/lapse

## run: lapse on the embedded default (SQLite file lapse.db, in-process timers)
run:
	go run ./cmd/lapse serve

## bench: the lateness benchmark of the README
bench:
	go run ./cmd/lapse bench --orders 2000 --spread 1s

lint:
	gofmt -l . | (! grep .) && go vet ./... && go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

fuzz:
	go test -run '^$$' -fuzz FuzzDecodeCreateOrder -fuzztime 60s ./httpapi/

## check-deploy: promtool on deploy/prometheus, systemd-analyze verify on deploy/systemd (installs them as root on Debian), helm lint and template on deploy/helm
check-deploy:
	bash scripts/check-deploy.sh

## release-snapshot: the release without publishing it, in dist/release: linux and darwin
## archives (amd64, arm64) with a CycloneDX SBOM each, the .deb, checksums.txt (goreleaser;
## scripts/tools.sh installs it and cyclonedx-gomod at their pinned versions)
release-snapshot:
	@if [ -f .git ]; then echo "make release-snapshot: run it from a clone, not a git worktree: cyclonedx-gomod (the SBOMs) reads the repository with go-git, which cannot open a worktree (git clone . /tmp/lapse-release)"; exit 1; fi
	bash scripts/tools.sh goreleaser cyclonedx-gomod
	PATH="$$(go env GOPATH)/bin:$$PATH" goreleaser release --snapshot --clean

## check-release: release-snapshot, then checks the archives, SBOMs, .deb and checksums
check-release:
	bash scripts/check-release.sh

## image: the OCI image, no Docker engine needed: dist/image (OCI layout) and dist/lapse-image.tar (umoci)
image:
	bash scripts/image.sh

## check-image: runs dist/image with runc (as root) against PostgreSQL: probes, non-root, SIGTERM
check-image:
	bash scripts/check-image.sh
