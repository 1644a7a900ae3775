# The two quick-start commands: `make demo` and `make test`. Both install what is missing
# (Debian packages via tools/install-deps.sh) and build first.
BUILD      ?= build
ASAN_BUILD ?= build-asan
JOBS       ?= $(shell nproc)
CMAKE_ARGS ?=
HAPCTL      = $(BUILD)/tools/hapctl/hapctl

.PHONY: all deps build build-asan test test-unit demo bench clean

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

# Every test (unit, parity, e2e) on the release build, then the unit tests under ASan+UBSan.
test: build build-asan
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --output-on-failure -j$(JOBS) -L unit -LE parity

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
	rm -rf $(BUILD) $(ASAN_BUILD)
