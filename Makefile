# Thin wrapper over CMake + ctest.  The real build lives in build/ (the
# firebreak binary is build/firebreak); the sanitizer build in build-asan/.
#
#   make build     configure and build (installs build dependencies first)
#   make demo      a real training run under firebreak with faults injected
#   make demo-torch  the same with the PyTorch example (examples/gpt)
#   make test      the whole suite, in build/ and again under ASan+UBSan
#   make bench     the benchmarks, each printing its baseline and the ratio;
#                  fails when a target is missed, ends with the table of all
#   make install   PREFIX=/usr/local, from build-release/ (no test hooks)
#   make clean

PREFIX ?= /usr/local
JOBS   ?= $(shell nproc)
CMAKE_FLAGS ?=
SAN_EXCLUDE ?= slurm|torch|chromium|bench|demo|build|torture

.PHONY: all build build-asan deps deps-build demo demo-torch test test-main test-asan bench install clean fuzz

all: build

deps-build:
	@bash scripts/deps.sh --build

deps:
	@bash scripts/deps.sh

build: deps-build
	@cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFB_TEST_HOOKS=ON $(CMAKE_FLAGS) >/dev/null
	@cmake --build build -j $(JOBS)

build-asan: deps-build
	@CC=clang cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DFB_SANITIZE=ON -DFB_TEST_HOOKS=ON $(CMAKE_FLAGS) >/dev/null
	@cmake --build build-asan -j $(JOBS)

demo: deps build
	@./build/firebreak demo --run-root demo-runs

demo-torch: deps build
	@./build/firebreak demo --torch --run-root demo-runs

test: deps
	@$(MAKE) --no-print-directory test-main
	@$(MAKE) --no-print-directory test-asan

# Each run also fails when it left anything behind (tests/leftovers.sh).
test-main: build
	@bash tests/leftovers.sh around build ctest --output-on-failure -j $(JOBS) -LE 'bench'

test-asan: build-asan
	@ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  bash tests/leftovers.sh around build-asan ctest --output-on-failure -j $(JOBS) -LE '$(SAN_EXCLUDE)'

# Each benchmark fails when it misses a target; the table of every target
# (bench/summary.sh over build/bench-results.tsv) comes last, then what the
# benchmarks left behind, if anything (tests/leftovers.sh).
bench: deps build
	@bash tests/leftovers.sh around build sh -c 't0=$$(date +%s); \
	  ctest --output-on-failure -V -L bench; rc=$$?; \
	  bash ../bench/summary.sh --elapsed $$(( $$(date +%s) - t0 )) bench-results.tsv || rc=1; \
	  exit $$rc'

fuzz: deps-build
	@CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Debug -DFB_FUZZ=ON -DFB_SANITIZE=ON >/dev/null
	@cmake --build build-fuzz -j $(JOBS)

# Installed from its own tree, without the checkpoint engine's test hooks
# (FB_TEST_HOOKS: docs/development.md); build/ keeps them for `make test`.
install: deps-build
	@cmake -S . -B build-release -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFB_TEST_HOOKS=OFF $(CMAKE_FLAGS) >/dev/null
	@cmake --build build-release -j $(JOBS)
	@cmake --install build-release --prefix $(PREFIX)

clean:
	rm -rf build build-asan build-fuzz build-release
