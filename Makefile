# The README's two commands: `make run` and `make test`. Both install missing packages
# (tools/install-deps.sh), configure with CMake and build first.
BUILD ?= build
ASAN_BUILD ?= build-asan
CMAKE_FLAGS ?=
JOBS ?= $(shell nproc)

.PHONY: all deps build run test test-asan bench fuzz clean

all: build

deps:
	@sh tools/install-deps.sh

$(BUILD)/build.ninja: CMakeLists.txt | deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS)

build: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

run: build
	./$(BUILD)/llmbench run

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

# The probes of bench/ (CUDA builds), in the same build folder with -DLB_BENCH=ON.
bench: deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLB_BENCH=ON $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS) --target bench

# The same tests under AddressSanitizer and UndefinedBehaviorSanitizer (CPU build).
test-asan: deps
	cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DLB_SANITIZE=ON -DLB_ENABLE_CUDA=OFF
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
		ctest --test-dir $(ASAN_BUILD) --output-on-failure -j $(JOBS)

# Every libFuzzer target of tests/fuzz for FUZZ_SECONDS each (needs clang; not part of CI,
# which replays the seed corpora in `make test`). New inputs go to $(FUZZ_BUILD)/corpus/,
# a crashing input to $(FUZZ_BUILD)/crash-*.
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
fuzz: deps
	cmake -S . -B $(FUZZ_BUILD) -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
		-DLB_FUZZ=ON -DLB_ENABLE_CUDA=OFF
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target fuzz
	for dir in tests/fuzz/corpus/*/; do name=$$(basename $$dir); \
		mkdir -p $(FUZZ_BUILD)/corpus/$$name && \
		$(FUZZ_BUILD)/tests/fuzz/fuzz_$$name -max_total_time=$(FUZZ_SECONDS) \
			-artifact_prefix=$(FUZZ_BUILD)/ $(FUZZ_BUILD)/corpus/$$name $$dir || exit 1; \
	done

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
