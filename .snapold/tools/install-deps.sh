#!/bin/sh
# Installs what building and testing reel needs, when it is missing:
# meson, ninja, pkg-config, Criterion, jemalloc and jansson (found through pkg-config).
# As root it uses apt-get; otherwise it says what to install and fails.
set -eu

missing=""
command -v meson >/dev/null 2>&1 || missing="$missing meson"
command -v ninja >/dev/null 2>&1 || missing="$missing ninja-build"
if ! command -v pkg-config >/dev/null 2>&1; then
    missing="$missing pkg-config libcriterion-dev libjemalloc-dev libjansson-dev"
else
    pkg-config --exists criterion || missing="$missing libcriterion-dev"
    pkg-config --exists jemalloc || missing="$missing libjemalloc-dev"
    pkg-config --exists jansson || missing="$missing libjansson-dev"
fi

[ -z "$missing" ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
    echo "reel needs:$missing" >&2
    echo "install them with: sudo apt-get install -y$missing" >&2
    exit 1
fi
echo "installing:$missing"
apt-get update
# shellcheck disable=SC2086
DEBIAN_FRONTEND=noninteractive apt-get install -y $missing
