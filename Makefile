# Thin front for CMake. The README's two commands are `make run` and `make test`.
BUILD      ?= build
ASAN_BUILD ?= build-asan
JOBS       ?= $(shell nproc)

.PHONY: all deps build build-asan test test-fast run run-envd bench images format format-check generate clean deb fuzz soak cluster-long

all: build

deps:
	@.ci/install-deps

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)
	webclient/build $(BUILD)/webclient
	@[ host/runner/js/node_modules/.package-lock.json -nt host/runner/js/package-lock.json ] || \
		(cd host/runner/js && npm ci --no-audit --no-fund --silent)
	@[ sdk/js/node_modules/.package-lock.json -nt sdk/js/package-lock.json ] || \
		(cd sdk/js && npm ci --no-audit --no-fund --silent)

$(ASAN_BUILD)/CMakeCache.txt:
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DCUBICLE_SANITIZE=ON \
		-DCUBICLE_IMAGES_DIR=$(abspath $(BUILD))/images

build-asan: deps $(ASAN_BUILD)/CMakeCache.txt
	cmake --build $(ASAN_BUILD) -j $(JOBS)

# Every test, twice: a normal build and an ASan+UBSan build (the guest
# image tests run once, against the normal build's images). Formatting
# drift fails it first, before anything is built.
test: format-check
	$(MAKE) build build-asan images
	ctest --test-dir $(BUILD) --output-on-failure -j 2
	ctest --test-dir $(ASAN_BUILD) --output-on-failure -j 2

# Only the normal build, for quick iteration.
test-fast: build
	ctest --test-dir $(BUILD) --output-on-failure -j 2

# Guest images into build/images/<name>/ (cached by content hash; see rootfs/),
# then the built-in templates over them (rootfs/templates/, docs/templates.md):
# their pinned npm packages installed here, the templates built by cubicled
# in the same cache (a hit when nothing changed).
images: build
	rootfs/build-image desktop $(BUILD)
	rootfs/build-image sandbox $(BUILD)
	@[ rootfs/templates/data/node_modules/.package-lock.json -nt rootfs/templates/data/package-lock.json ] || \
		(cd rootfs/templates/data && npm ci --no-audit --no-fund --silent)
	$(BUILD)/bin/cubicled --build-templates --images $(BUILD)/images --templates rootfs/templates

# cubicled with a warm desktop, and how to use it (host/run-dev).
run: build images
	@host/run-dev

# envd alone on a bare Xvfb desktop, for working on envd itself.
run-envd: build
	@python3 tests/envd/dev_desktop.py

bench: build
	@bench/run

# Rewrites the committed outputs of spec/ (the Python SDK's action table,
# docs/openapi.json) after a change to spec/*.json; the build checks them.
generate:
	python3 spec/gen.py write

# A Debian package of envd alone, for a machine you bring (docs/byo.md):
# $(BUILD)/cubicle-envd_VERSION_ARCH.deb; install it, then run the command
# POST /v1/connect-tokens gives.
deb: build
	@deb/build-deb $(BUILD) $(BUILD)

# Every libFuzzer harness for FUZZ_SECONDS each (tests/fuzz/README.md); new
# inputs are kept in $(BUILD)/fuzz-corpus/, crashes in $(BUILD)/fuzz-crashes/.
FUZZ_SECONDS ?= 60
fuzz: build
	@tests/fuzz/run $(BUILD) $(FUZZ_SECONDS)

# The long soak with chaos (tests/soak/README.md); not part of `make test`,
# which runs its short version. SOAK_MINUTES long.
SOAK_MINUTES ?= 60
soak: build images
	@python3 tests/soak/soak.py --build $(BUILD) --minutes $(SOAK_MINUTES)

# The cluster's suite (tests/cluster/) with the kill -9 case repeated
# CLUSTER_KILLS times (CI runs 3), and bench/cluster.py's figures.
CLUSTER_KILLS ?= 20
cluster-long: build images
	cd tests/cluster && CUBICLE_BUILD=$(abspath $(BUILD)) CUBICLE_CLUSTER_KILLS=$(CLUSTER_KILLS) \
		python3 -m unittest -v test_cluster test_pg_failover
	CUBICLE_BUILD=$(abspath $(BUILD)) python3 bench/cluster.py --kills $(CLUSTER_KILLS) --patroni

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

# Fails, naming the lines, when a tracked C file differs from what
# `make format` would make of it.
format-check: deps
	clang-format --dry-run -Werror $$(git ls-files '*.c' '*.h')

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
