#!/usr/bin/env bash
# The one test command (README and .ci/run): install the pinned peers (in the background),
# format check, clippy with warnings as errors, README's demo, then every test in the
# workspace. Exits non-zero on the first failing step.
#
# The tools the tests use are in .tools/bin, put first on PATH here (see
# scripts/install-deps.sh): crane, oras, cosign, umoci-0.6 (Go umoci v0.6.0; plain `umoci` stays
# Debian's 0.4.7), conformance, conformance.test, weed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

export PATH="$ROOT/.tools/bin:$PATH"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

T0=$SECONDS
step() { # title command...
	local title=$1 start=$SECONDS rc=0
	shift
	printf '\n==== %s ====\n$ %s\n' "$title" "$*"
	"$@" || rc=$?
	if ((rc != 0)); then
		printf '==== %s: FAILED (exit %d) after %ds (total %ds) ====\n' "$title" "$rc" $((SECONDS - start)) $((SECONDS - T0))
		# A full disk fails tests far from its cause (SeaweedFS answers 500); show it.
		df -h "$ROOT" "${TMPDIR:-/tmp}" || true
		exit "$rc"
	fi
	printf '==== %s: ok in %ds ====\n' "$title" $((SECONDS - start))
}

# The peers the tests use install in the background while the steps that need none of them
# run (format, clippy, the README demo): on a fresh machine much of the install is downloads
# and dpkg, which then overlap with compiling. Its output is shown when it is waited for.
DEPS_LOG="$(mktemp "${TMPDIR:-/tmp}/install-deps.XXXXXX")"
"$ROOT/scripts/install-deps.sh" </dev/null >"$DEPS_LOG" 2>&1 &
DEPS_PID=$!
trap 'kill "$DEPS_PID" 2>/dev/null || true; rm -f "$DEPS_LOG"' EXIT
deps_installed() {
	local rc=0
	wait "$DEPS_PID" || rc=$?
	cat "$DEPS_LOG"
	return "$rc"
}

step "cargo fmt" cargo fmt --all -- --check
step "cargo clippy" cargo clippy --workspace --all-targets -- -D warnings
# The demo's rdctl (README "Try it"): no s3 feature, a different feature set of the registry.
step "cargo clippy, rdctl without s3" cargo clippy -p rdctl --no-default-features -- -D warnings
# What ships to illumos, compiled for it (the code behind cfg(target_os = "illumos")).
step "cargo clippy, rdctl for illumos" "$ROOT/scripts/check-illumos.sh"
step "README main command" "$ROOT/scripts/check-readme.sh"
step "install deps (started first, in the background)" deps_installed
# The test binaries run in three groups at the same time, since much of their time is waiting
# on servers, child processes and FUSE rather than CPU: the root `tests` binary (cross-crate
# flows), every other test target with the unit tests, and the binaries on the zfs-fuse pool;
# then the doc-tests. One build makes every binary first (same features as a plain
# `cargo test --workspace`). Each group's output is printed whole when all three have ended.
run_tests() {
	cargo test --workspace --no-fail-fast --no-run
	local others a b z rc_a=0 rc_b=0 rc_z=0 rc_doc=0 pid_a pid_z
	# The test binaries on the zfs-fuse pool run one at a time, each one test at a time, in
	# their own group: zfs-fuse 0.7 can deadlock when several mounts are made at once (a new
	# clone's FUSE connection never answers, and the test thread opening a file in it waits
	# forever), which once hung CI. No other group mounts anything on it.
	local zfs="provision_zfs worker_zfs zfs_store"
	others=$(cargo metadata --no-deps --format-version 1 | python3 -c '
import json, sys
m = json.load(sys.stdin)
names = sorted({t["name"] for p in m["packages"] for t in p["targets"] if "test" in t["kind"]} - {"tests"} - set(sys.argv[1:]))
print(" ".join("--test " + n for n in names))' $zfs)
	a=$(mktemp "${TMPDIR:-/tmp}/test-root.XXXXXX")
	b=$(mktemp "${TMPDIR:-/tmp}/test-others.XXXXXX")
	z=$(mktemp "${TMPDIR:-/tmp}/test-zfs.XXXXXX")
	echo "running at once: the root tests binary; $others --lib --bins; and one test at a time: $zfs, then worker_kill::zfs"
	cargo test --workspace --no-fail-fast --test tests >"$a" 2>&1 &
	pid_a=$!
	{
		# shellcheck disable=SC2046 # one word per option
		cargo test --workspace --no-fail-fast $(printf -- '--test %s ' $zfs) -- --test-threads=1 || rc_z=$?
		# The root binary's one zfs-fuse test, #[ignore]d in its parallel run.
		cargo test --no-fail-fast --test tests worker_kill::zfs -- --ignored --test-threads=1 || rc_z=$?
		exit "$rc_z"
	} >"$z" 2>&1 &
	pid_z=$!
	# shellcheck disable=SC2086 # one word per option
	cargo test --workspace --no-fail-fast --lib --bins $others >"$b" 2>&1 || rc_b=$?
	wait "$pid_a" || rc_a=$?
	wait "$pid_z" || rc_z=$?
	printf '\n---- the other test targets (exit %d) ----\n' "$rc_b"
	cat "$b"
	printf '\n---- the zfs-fuse test targets (exit %d) ----\n' "$rc_z"
	cat "$z"
	printf '\n---- the root tests binary (exit %d) ----\n' "$rc_a"
	cat "$a"
	rm -f "$a" "$b" "$z"
	cargo test --workspace --no-fail-fast --doc || rc_doc=$?
	((rc_a == 0 && rc_b == 0 && rc_z == 0 && rc_doc == 0))
}
step "cargo test" run_tests

printf '\n==== all steps passed in %ds ====\n' $((SECONDS - T0))
