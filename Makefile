# dueq: `make demo` and `make test` are the two commands a new user needs.
# Both install missing Debian packages first (as root, or through sudo).

SHELL := /bin/bash
BUILD_DIR ?= build
SAN_BUILD_DIR ?= build-asan
JOBS ?= 2

# What building and `make demo` need (the demo's broker runs its embedded
# store with redis-server); the test tools come with `make test` and the
# other targets that build the suite.
PACKAGES := build-essential cmake ninja-build pkg-config \
	libzmq3-dev cppzmq-dev libhiredis-dev libmsgpack-cxx-dev libspdlog-dev libfmt-dev \
	libcli11-dev libtomlplusplus-dev libcpp-httplib-dev libhowardhinnant-date-dev tzdata nlohmann-json3-dev libxxhash-dev libjemalloc-dev \
	redis-server
TEST_PACKAGES := libgtest-dev openssl redis-tools redis-sentinel iproute2 iptables prometheus tmux chromium \
	python3-websocket fonts-dejavu-core python3-zmq python3-msgpack python3-xxhash python3-venv mypy lintian

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

SEED ?= 1
DURATION ?= 10m
DEV_BUILD_DIR ?= build-dev

SCENARIO ?= all
BENCH_FLAGS := --scenario $(SCENARIO) $(if $(SMOKE),--smoke,)

.PHONY: deps test-deps node-deps build demo install deb test lint chaos nemesis nemesis-named bench bench-peers fuzz tsan clean

# $(call install_missing,PACKAGES): apt-get installs those not yet installed.
define install_missing
	@missing=""; for p in $(1); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $$missing; \
	fi
endef

deps:
	$(call install_missing,$(PACKAGES))

test-deps: node-deps
	$(call install_missing,$(PACKAGES) $(TEST_PACKAGES))

# Node and npm (the Node.js client's tests, the BullMQ bench) come from
# Debian unless some node and npm are on the PATH.
node-deps:
	@command -v node >/dev/null && command -v npm >/dev/null || { \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends nodejs npm; }

build: deps
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDUEQ_TESTS=OFF >/dev/null
	cmake --build $(BUILD_DIR) -j$(JOBS)

demo: build
	scripts/demo.sh $(BUILD_DIR)/bin

# The programs, headers, libdueq.so, its CMake package and pkg-config file:
# make install [PREFIX=/usr/local]
PREFIX ?= /usr/local
install: build
	cmake --install $(BUILD_DIR) --prefix $(PREFIX)

# Debian packages (dueq, libdueq0.1, libdueq-dev) in $(BUILD_DIR)/packages:
# sudo apt install ./build/packages/*.deb
deb: build
	cd $(BUILD_DIR) && cpack -B packages >/dev/null && ls packages/*.deb

# The suite runs on a build with AddressSanitizer and UndefinedBehaviorSanitizer.
# Four tests at a time on two cores: most of a test's time is spent waiting
# for processes and timers. ctest starts the costliest first (COST in
# tests/CMakeLists.txt: the nemesis runs, one at a time, and the Sentinel
# and Redis Cluster tests, one at a time beside them), so no long test is
# left running alone at the end.
TEST_JOBS ?= 4
# ASan holds freed memory back from reuse for 16 MB of frees per process,
# not its 256 MB default, under which a busy process's allocations keep
# touching fresh pages: EndToEnd.HostilePeers… took 12.5 s of CPU instead of
# 17.5 s (two runs each). A use after free within 16 MB is still caught.
# An allocation's stack is kept 5 frames deep, not 30: a report still
# names where a bad access happened in full, and where the memory was
# allocated and freed by its 5 innermost frames. Storing every distinct
# 30-frame stack cost a sanitized process a third of its page faults at
# start (dueq --help: 3,282 faults, 72 ms of CPU; 2,373 and 55 ms).
TEST_ASAN_OPTIONS := detect_leaks=1:abort_on_error=1:quarantine_size_mb=16:malloc_context_size=5
# The Node.js package's dependencies (npm ci, from its lockfile) install
# while the build compiles: fetching them is no work for the cores.
test: test-deps
	cmake -S . -B $(SAN_BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDUEQ_SANITIZE=ON -DDUEQ_UNITY=ON -DDUEQ_TESTS=ON >/dev/null
	(cd clients/node && npm ci --no-audit --no-fund --silent) >$(SAN_BUILD_DIR)/npm-ci.log 2>&1 & npm=$$!; \
	  cmake --build $(SAN_BUILD_DIR) -j$(JOBS); built=$$?; \
	  wait $$npm || { cat $(SAN_BUILD_DIR)/npm-ci.log; exit 1; }; [ $$built -eq 0 ]
	cd $(SAN_BUILD_DIR) && ASAN_OPTIONS=$(TEST_ASAN_OPTIONS) UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest -j$(TEST_JOBS) --output-on-failure --timeout 600

# clang-tidy over every source (the checks in .clang-tidy; the tests leave
# out two, tests/.clang-tidy says why), from a compile database made with
# clang-16 (it reads GCC's flags badly, and GCC's precompiled headers not at
# all); any finding fails.
LINT_BUILD_DIR ?= build-lint
lint: test-deps
	$(call install_missing,clang-16 clang-tidy-16)
	CXX=clang++-16 cmake -S . -B $(LINT_BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_EXPORT_COMPILE_COMMANDS=ON -DDUEQ_TESTS=ON >/dev/null
	cmake --build $(LINT_BUILD_DIR) --target dueq_lua
	run-clang-tidy-16 -quiet -j $(JOBS) -p $(LINT_BUILD_DIR) '$(CURDIR)/(broker|cli|clients/cpp|common|worker|bench|tests)/.*\.cpp$$'

# A longer chaos run: make chaos SEED=7 DURATION=10m
chaos: test-deps
	cmake -S . -B $(DEV_BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDUEQ_TESTS=ON >/dev/null
	cmake --build $(DEV_BUILD_DIR) -j$(JOBS)
	$(DEV_BUILD_DIR)/bin/chaos_run --seed $(SEED) --duration $(DURATION)

# A longer nemesis run (as root: network namespaces): make nemesis SEED=7 MINUTES=10
# replays seed 7's schedule of faults; a failed run keeps its history and logs.
# NEMESIS_FLAGS=--cluster (or --embedded, --faults disk,...) picks a variant.
MINUTES ?= 5
NEMESIS_FLAGS ?=
nemesis: test-deps
	cmake -S . -B $(DEV_BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDUEQ_TESTS=ON >/dev/null
	cmake --build $(DEV_BUILD_DIR) -j$(JOBS)
	$(DEV_BUILD_DIR)/bin/nemesis_run --seed $(SEED) --duration $(MINUTES)m $(NEMESIS_FLAGS)

# The named schedules (docs/failure-modes.md), one after another, or one:
# make nemesis-named [SCHEDULE=paused-leader] [BROKER_BIN=/path/to/an/older/dueq-broker]
NAMED_SCHEDULES ?= paused-leader standby-clock-ahead demoted-master embedded-store-kept-down late-bytes-new-queue take-over-20000-queues
SCHEDULE ?= $(NAMED_SCHEDULES)
nemesis-named: test-deps
	cmake -S . -B $(DEV_BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDUEQ_TESTS=ON >/dev/null
	cmake --build $(DEV_BUILD_DIR) -j$(JOBS)
	set -e; for s in $(SCHEDULE); do \
	  $(DEV_BUILD_DIR)/bin/nemesis_run --schedule $$s --batch 2 $(if $(BROKER_BIN),--broker-bin $(BROKER_BIN)); done

# Benchmarks: make bench [SCENARIO=lateness] [SMOKE=1]; records go to bench/results/.
bench: test-deps
	cmake -S . -B $(DEV_BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDUEQ_TESTS=ON >/dev/null
	cmake --build $(DEV_BUILD_DIR) -j$(JOBS)
	cd clients/node && npm ci --no-audit --no-fund --silent  # the node_worker scenario's package
	$(DEV_BUILD_DIR)/bin/dueq-bench $(BENCH_FLAGS)

# BullMQ (pinned in bench/peers/package.json and its lock file, installed into
# bench/peers/node_modules) beside dueq on the single-job, low-rate and
# default-settings scenarios, with dueq/BullMQ ratios: make bench-peers [SMOKE=1]
bench-peers: test-deps
	cd bench/peers && npm install --ignore-scripts --no-audit --no-fund
	cmake -S . -B $(DEV_BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDUEQ_TESTS=ON >/dev/null
	cmake --build $(DEV_BUILD_DIR) -j$(JOBS)
	$(DEV_BUILD_DIR)/bin/dueq-bench --scenario peers $(if $(SMOKE),--smoke,)

# libFuzzer targets (tests/fuzz), each run FUZZ_SECONDS from its committed
# corpus: make fuzz [FUZZ_SECONDS=600] [FUZZ_MERGE=1 keeps new coverage in
# tests/fuzz/corpus]. clang 16: Debian's clang 14 cannot compile std::expected.
FUZZ_BUILD_DIR ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_MERGE ?= 0
FUZZ_TARGETS := frame_decoder_fuzz job_record_fuzz config_fuzz redis_url_fuzz cluster_reply_fuzz cron_fuzz json_bytes_fuzz http_request_fuzz

fuzz: test-deps
	$(call install_missing,clang-16 libclang-rt-16-dev)
	CXX=clang++-16 cmake -S . -B $(FUZZ_BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDUEQ_FUZZ=ON -DDUEQ_TESTS=OFF >/dev/null
	cmake --build $(FUZZ_BUILD_DIR) -j$(JOBS) --target $(FUZZ_TARGETS)
	scripts/fuzz.sh $(FUZZ_BUILD_DIR) $(FUZZ_SECONDS) $(FUZZ_MERGE)

# The end-to-end and recovery suites with ThreadSanitizer in every process
# they start (broker, workers, CLI); fails on any report.
TSAN_BUILD_DIR ?= build-tsan
TSAN_TARGETS := e2e_tests recovery_tests dueq-broker dueq-worker dueq-example-worker dueq

tsan: test-deps
	cmake -S . -B $(TSAN_BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDUEQ_TSAN=ON -DDUEQ_TESTS=ON >/dev/null
	cmake --build $(TSAN_BUILD_DIR) -j$(JOBS) --target $(TSAN_TARGETS)
	scripts/tsan.sh $(TSAN_BUILD_DIR)

clean:
	rm -rf $(BUILD_DIR) $(SAN_BUILD_DIR) $(DEV_BUILD_DIR) $(FUZZ_BUILD_DIR) $(TSAN_BUILD_DIR)
