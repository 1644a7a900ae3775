# The two quick-start commands: `make demo` and `make test`. Both install what is missing
# (Debian packages via tools/install-deps.sh) and build first.
BUILD      ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
FUZZ_TIME  ?= 20
TSAN_BUILD ?= build-tsan
JOBS       ?= $(shell nproc)
CMAKE_ARGS ?=
HAPCTL      = $(BUILD)/tools/hapctl/hapctl

.PHONY: all deps build build-asan fuzz-build fuzz test test-unit demo bench clean

all: build

deps:
	@bash tools/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_ARGS) >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)

build-asan: deps
	@cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DHAP_SANITIZE=ON -DHAP_CUDA=OFF \
	  -DHAP_BUILD_BENCH=OFF >/dev/null
	@cmake --build $(ASAN_BUILD) -j$(JOBS)

# The libFuzzer targets of tests/fuzz (clang-14; every library under ASan+UBSan with coverage
# instrumentation, so a build dir of its own), then each target for FUZZ_TIME seconds on a copy of
# its committed corpus; fails on any crash (the input is kept; bench/fuzz/run.sh prints where).
fuzz-build: deps
	@cmake -S . -B $(FUZZ_BUILD) -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang-14 \
	  -DCMAKE_CXX_COMPILER=clang++-14 -DHAP_FUZZ=ON -DHAP_CUDA=OFF -DHAP_BUILD_TESTS=OFF \
	  -DHAP_BUILD_BENCH=OFF >/dev/null
	@cmake --build $(FUZZ_BUILD) --target hap_fuzzers -j$(JOBS)

fuzz: fuzz-build
	bash bench/fuzz/run.sh --build $(FUZZ_BUILD) --time $(FUZZ_TIME) --jobs $(JOBS)

# ThreadSanitizer, a pre-release check outside `make test` (~16 min to build on 2 cores, 5-8 to
# run): every e2e test, whose services, hapctl and SDK children run instrumented, and the unit
# tests of the services' threading. A race stops the process that saw it (exit 66, the report on
# its stderr, which the test's log keeps); the logs are also searched, since a test need not
# notice a child that died. tests/tsan.supp says what is suppressed and why; history_size=4 keeps
# enough of each thread's history for a report's earlier stack to be restored and matched.
.PHONY: build-tsan tsan clean-tsan
TSAN_UNIT_TESTS = outbox_reactor_test token_auth_test kv_codec_test replica_set_test decode_load_test worker_pool_test \
  health_service_test prefill_cancellation_test model_batching_test base_thread_pool_test \
  base_compute_gate_test prefill_slices_test prefill_batcher_test \
  telemetry_exporter_test telemetry_metrics_test telemetry_tracer_test openai_chat_api_test
TSAN_SPACE := $(subst ,, )
TSAN_UNIT  = ^($(subst $(TSAN_SPACE),|,$(strip $(TSAN_UNIT_TESTS))))$$
TSAN_ENV  = TSAN_OPTIONS="suppressions=$(CURDIR)/tests/tsan.supp halt_on_error=1 \
            second_deadlock_stack=1 history_size=4"
TSAN_LOG  = $(TSAN_BUILD)/Testing/Temporary/LastTest.log
TSAN_SCAN = if grep -q "WARNING: ThreadSanitizer" $(TSAN_LOG); then \
              grep -n -A40 "WARNING: ThreadSanitizer" $(TSAN_LOG); \
              echo "ThreadSanitizer reported the race(s) above ($(TSAN_LOG))"; exit 1; fi

build-tsan: deps
	@cmake -S . -B $(TSAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DHAP_TSAN=ON -DHAP_CUDA=OFF \
	  -DHAP_BUILD_BENCH=OFF >/dev/null
	@cmake --build $(TSAN_BUILD) -j$(JOBS)

tsan: build-tsan
	cd $(TSAN_BUILD) && $(TSAN_ENV) ctest --output-on-failure -j$(JOBS) -R '$(TSAN_UNIT)'
	@$(TSAN_SCAN)
	cd $(TSAN_BUILD) && $(TSAN_ENV) ctest --output-on-failure -L e2e
	@$(TSAN_SCAN)

clean: clean-tsan
clean-tsan:
	rm -rf $(TSAN_BUILD)

# Every test (unit, parity, e2e) on the release build, then the unit tests under ASan+UBSan,
# then each fuzz target for FUZZ_TIME seconds from its committed corpus (crash inputs found
# earlier are in it, so they are replayed first). At the end (or where a ctest run fails) the
# tests and GoogleTest cases that were skipped, each with its reason (tools/ctest_skipped.py
# reads ctest's JUnit files): a skip is not a pass.
CTEST_SKIPPED = /usr/bin/python3 $(CURDIR)/tools/ctest_skipped.py
test: build build-asan
	cd $(BUILD) && { ctest --output-on-failure -j$(JOBS) --output-junit "$$PWD/Testing/junit.xml" || \
	  { rc=$$?; $(CTEST_SKIPPED) "$$PWD/Testing/junit.xml"; exit $$rc; }; }
	cd $(ASAN_BUILD) && { ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --output-on-failure -j$(JOBS) -L unit -LE parity --output-junit "$$PWD/Testing/junit.xml" || \
	  { rc=$$?; $(CTEST_SKIPPED) "$$PWD/Testing/junit.xml"; exit $$rc; }; }
	$(MAKE) fuzz
	@$(CTEST_SKIPPED) $(BUILD)/Testing/junit.xml $(ASAN_BUILD)/Testing/junit.xml

test-unit: build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS) -L unit

demo: build
	@bash tools/demo.sh $(HAPCTL)

# Benchmarks (programs that print numbers; not part of `make test`). The mid-size checkpoint
# (hidden 1024, 32 layers, 16 heads, ffn 2816, 336 px -> 576 visual tokens) is written once.
MID_MODEL = $(BUILD)/bench-models/mid
$(MID_MODEL)/config.json: | build
	$(HAPCTL) make-tiny --out $(MID_MODEL) --layers 32 --hidden 1024 --heads 16 \
	  --intermediate 2816 --image-size 336 --vision-layers 2 --vision-hidden 64 --dtype bf16

bench: build $(MID_MODEL)/config.json
	$(BUILD)/bench/runtime/prefill_bench --model $(MID_MODEL) --image data/scenes-test/images/test_0000.jpg \
	  --decode-tokens 16 --retain 192,128,64,32

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
