# Quick start on a fresh machine: `make demo` runs the serving demo, `make test`
# runs every test suite (normal build, then an ASan/UBSan build). Both install
# what is missing first (tools/install-deps.sh) and configure and build; the
# configure and build output goes to BUILD/make.log (printed where a step fails).
SHELL := /bin/bash
BUILD ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 20
DEMO_ARGS ?=
SOAK_ARGS ?=
MESON_ARGS ?=
ASAN_MESON_ARGS := -Db_sanitize=address,undefined -Dallocator=system -Dcuda=disabled -Dfault_injection=true
# nvcc lives here on CUDA machines; meson's auto-detected CUDA support needs it on PATH.
export PATH := $(if $(wildcard /usr/local/cuda/bin),/usr/local/cuda/bin:)$(PATH)

.PHONY: all deps build build-asan demo test test-normal test-asan test-fuzz test-fault soak clean

all: build

deps:
	@tools/install-deps.sh

# quiet_build DIR ARGS: install what is missing, configure DIR unless it already
# is (ninja re-runs meson by itself when a meson.build changes; a half-configured
# DIR is wiped), build; all of it into DIR/make.log, whose end is printed on failure.
define quiet_build
	@mkdir -p $(1); log=$(1)/make.log; \
	if [ ! -f $(1)/build.ninja ] || ninja -C $(1) -n 2>/dev/null | grep -q '^\[1/'; then \
	  echo "reel: building $(1) (configure and build output: $$log)"; fi; \
	{ tools/install-deps.sh && \
	  if [ -f $(1)/build.ninja ]; then :; \
	  elif [ -d $(1)/meson-private ]; then meson setup --wipe $(1) $(2); \
	  else meson setup $(1) $(2); fi && \
	  ninja -C $(1); } > $$log 2>&1 \
	|| { tail -n 40 $$log >&2; echo "reel: building $(1) failed; the whole log is $$log" >&2; exit 1; }
endef

build:
	$(call quiet_build,$(BUILD),$(MESON_ARGS))

build-asan:
	$(call quiet_build,$(ASAN_BUILD),$(ASAN_MESON_ARGS) $(MESON_ARGS))
	@grep -q 'REEL_FAULT_INJECTION 1' $(ASAN_BUILD)/reel_config.h || \
	{ meson configure $(ASAN_BUILD) -Dfault_injection=true && ninja -C $(ASAN_BUILD); } >> $(ASAN_BUILD)/make.log 2>&1 \
	|| { tail -n 40 $(ASAN_BUILD)/make.log >&2; exit 1; }

demo: build
	@$(BUILD)/tools/reel demo $(DEMO_ARGS)

# Each runs one build's suites into BUILD/make-test.log and prints the failures.
define quiet_test
	@echo "testing $(1) (log: $(1)/make-test.log)"; \
	meson test -C $(1) --print-errorlogs > $(1)/make-test.log 2>&1 \
	|| { grep -E '^ *[0-9]+/[0-9]+ .*(FAIL|TIMEOUT|ERROR)' $(1)/make-test.log >&2; \
	     echo "reel: tests failed in $(1); the whole log is $(1)/make-test.log" >&2; exit 1; }
endef

test-normal: build
	$(call quiet_test,$(BUILD))

test-asan: build-asan
	$(call quiet_test,$(ASAN_BUILD))

# libFuzzer targets (tests/fuzz, clang), FUZZ_SECONDS each, both at once;
# skipped with a message where clang's fuzzer runtime is missing.
test-fuzz:
	@tests/fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

# The fault-injection walk alone (tests/fault; the ASan build has the option).
test-fault: build-asan
	@meson test -C $(ASAN_BUILD) --suite fault --print-errorlogs

# Nightly, not CI: the demo serving loop for 100,000 steps on the host
# backend with fallbacks mixed in; fails if resident memory grows after the
# warm-up or a step falls back unexpectedly (bench/soak.c, docs/reliability.md).
# On a GPU: make soak SOAK_ARGS="--backend cuda --model demo --steps 1000000".
soak: build
	@$(BUILD)/bench/bench_soak $(SOAK_ARGS)

# Runs all three even when one fails, then prints one line over the suites.
test:
	@rm -f $(BUILD)/make-test.log $(ASAN_BUILD)/make-test.log; \
	rc=0; $(MAKE) --no-print-directory test-normal || rc=1; \
	$(MAKE) --no-print-directory test-asan || rc=1; \
	$(MAKE) --no-print-directory test-fuzz || rc=1; \
	tools/test-summary.sh $(BUILD)/make-test.log $(ASAN_BUILD)/make-test.log || rc=1; \
	exit $$rc

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
