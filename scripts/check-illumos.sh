#!/usr/bin/env bash
# Compiles what ships to illumos (rdctl, with the worker's illumos provisioner and start-up)
# for x86_64-unknown-illumos under clippy with warnings as errors, so code behind
# `cfg(target_os = "illumos")` (and code that only compiles on Linux, like rustix's
# `sendfile`) is checked on this Linux machine too. Checked, never linked: the C sources of
# dependencies (zstd, ring) are compiled by the host's C compiler, which a check needs no more
# of. The test crates stay Linux-only (SeaweedFS, zfs-fuse, docker).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
TARGET=x86_64-unknown-illumos
if ! rustup target list --installed | grep -qx "$TARGET"; then
	rustup target add "$TARGET"
fi
export CC_x86_64_unknown_illumos="${CC_x86_64_unknown_illumos:-cc}"
export AR_x86_64_unknown_illumos="${AR_x86_64_unknown_illumos:-ar}"
exec cargo clippy --target "$TARGET" -p rdctl -p worker-runtime -- -D warnings
