#!/usr/bin/env bash
# The one test command (README and .ci/run): install the pinned peers, then format check,
# clippy with warnings as errors, and every test in the workspace. Exits non-zero on the
# first failing step.
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

step "install deps" "$ROOT/scripts/install-deps.sh"
step "cargo fmt" cargo fmt --all -- --check
step "cargo clippy" cargo clippy --workspace --all-targets -- -D warnings
# The demo's rdctl (README "Try it"): no s3 feature, a different feature set of the registry.
step "cargo clippy, rdctl without s3" cargo clippy -p rdctl --no-default-features -- -D warnings
step "README main command" "$ROOT/scripts/check-readme.sh"
step "cargo test" cargo test --workspace --no-fail-fast

printf '\n==== all steps passed in %ds ====\n' $((SECONDS - T0))
