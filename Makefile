# Quick start on a fresh machine: `make demo` runs the serving demo, `make test`
# runs every test suite (normal build, then an ASan/UBSan build). Both install
# what is missing first (tools/install-deps.sh) and configure and build.
SHELL := /bin/bash
BUILD ?= build
ASAN_BUILD ?= build-asan
DEMO_ARGS ?=
MESON_ARGS ?=
ASAN_MESON_ARGS := -Db_sanitize=address,undefined -Dallocator=system -Dcuda=disabled
# nvcc lives here on CUDA machines; meson's auto-detected CUDA support needs it on PATH.
export PATH := $(if $(wildcard /usr/local/cuda/bin),/usr/local/cuda/bin:)$(PATH)

.PHONY: all deps build build-asan demo test test-normal test-asan clean

all: build

deps:
	@tools/install-deps.sh

# setup_or_keep DIR ARGS: configure DIR unless it already is (ninja re-runs
# meson by itself when a meson.build changes); a half-configured DIR is wiped.
define setup_or_keep
	@if [ -f $(1)/build.ninja ]; then :; \
	elif [ -d $(1)/meson-private ]; then meson setup --wipe $(1) $(2); \
	else meson setup $(1) $(2); fi
endef

build: deps
	$(call setup_or_keep,$(BUILD),$(MESON_ARGS))
	ninja -C $(BUILD)

build-asan: deps
	$(call setup_or_keep,$(ASAN_BUILD),$(ASAN_MESON_ARGS) $(MESON_ARGS))
	ninja -C $(ASAN_BUILD)

demo: build
	./$(BUILD)/tools/reel demo $(DEMO_ARGS)

# Each runs one build's suites and keeps meson's output for the summary.
test-normal: build
	@set -o pipefail; meson test -C $(BUILD) --print-errorlogs 2>&1 | tee $(BUILD)/make-test.log

test-asan: build-asan
	@set -o pipefail; meson test -C $(ASAN_BUILD) --print-errorlogs 2>&1 | tee $(ASAN_BUILD)/make-test.log

# Runs both even when the first fails, then prints one line over both.
test:
	@rm -f $(BUILD)/make-test.log $(ASAN_BUILD)/make-test.log; \
	rc=0; $(MAKE) --no-print-directory test-normal || rc=1; \
	$(MAKE) --no-print-directory test-asan || rc=1; \
	tools/test-summary.sh $(BUILD)/make-test.log $(ASAN_BUILD)/make-test.log || rc=1; \
	exit $$rc

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
