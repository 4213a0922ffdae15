#!/bin/sh
# Installs what building and testing reel needs, when it is missing:
# meson, ninja, pkg-config, Criterion, jemalloc and jansson (found through pkg-config).
# As root it uses apt-get; otherwise it says what to install and fails. As root it also
# installs numpy for the system python3 (the Python package's test; without it that
# test is skipped, so it is never a reason to fail).
set -eu

missing=""
if [ "$(id -u)" -eq 0 ] && ! python3 -c 'import numpy' >/dev/null 2>&1 &&
    ! /usr/bin/python3 -c 'import numpy' >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    optional="python3-numpy"
else
    optional=""
fi
command -v meson >/dev/null 2>&1 || missing="$missing meson"
command -v ninja >/dev/null 2>&1 || missing="$missing ninja-build"
if ! command -v pkg-config >/dev/null 2>&1; then
    missing="$missing pkg-config libcriterion-dev libjemalloc-dev libjansson-dev"
else
    pkg-config --exists criterion || missing="$missing libcriterion-dev"
    pkg-config --exists jemalloc || missing="$missing libjemalloc-dev"
    pkg-config --exists jansson || missing="$missing libjansson-dev"
fi

[ -z "$missing$optional" ] && exit 0

if [ -n "$missing" ] && [ "$(id -u)" -ne 0 ]; then
    echo "reel needs:$missing" >&2
    echo "install them with: sudo apt-get install -y$missing" >&2
    exit 1
fi
if [ -n "$missing" ]; then
    echo "installing:$missing"
    apt-get update
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive apt-get install -y $missing
fi
if [ -n "$optional" ]; then
    { [ -n "$missing" ] || apt-get update >/dev/null 2>&1; } &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y $optional >/dev/null 2>&1 ||
        echo "install-deps: $optional could not be installed: the Python package's test will be skipped" >&2
fi
exit 0
