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
MESON_ARGS ?=
ASAN_MESON_ARGS := -Db_sanitize=address,undefined -Dallocator=system -Dcuda=disabled
# nvcc lives here on CUDA machines; meson's auto-detected CUDA support needs it on PATH.
export PATH := $(if $(wildcard /usr/local/cuda/bin),/usr/local/cuda/bin:)$(PATH)

.PHONY: all deps build build-asan demo test test-normal test-asan test-fuzz clean

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
