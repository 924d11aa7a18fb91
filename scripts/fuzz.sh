#!/usr/bin/env bash
# A short fuzz run of every cargo-fuzz target (validator, ips-bridge, registry-client, trust,
# registry, worker-runtime). Not part of the test
# command: it needs a nightly toolchain and cargo-fuzz. The seeds are the checked-in corpora.
#   scripts/fuzz.sh            60 s per target
#   FUZZ_SECONDS=600 scripts/fuzz.sh
#   scripts/fuzz.sh spdx evidence   only the targets named
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SECONDS_PER_TARGET="${FUZZ_SECONDS:-60}"
rustup toolchain list | grep -q '^nightly' || { echo "fuzz.sh: needs a nightly toolchain (rustup toolchain install nightly)" >&2; exit 2; }
command -v cargo-fuzz >/dev/null || cargo install --locked cargo-fuzz --root "$ROOT/.tools"
export PATH="$ROOT/.tools/bin:$PATH"
ONLY=("$@")

run() { # crate-dir target seed-dir...
	local dir=$1 target=$2
	shift 2
	if ((${#ONLY[@]})) && [[ " ${ONLY[*]} " != *" $target "* ]]; then
		return 0
	fi
	local corpus="$ROOT/$dir/fuzz/corpus/$target"
	mkdir -p "$corpus"
	for seeds in "$@"; do
		[ -d "$seeds" ] && cp -n "$seeds"/* "$corpus"/ 2>/dev/null || true
	done
	echo "==== fuzz $dir/$target for ${SECONDS_PER_TARGET}s ===="
	(cd "$ROOT/$dir/fuzz" && cargo +nightly fuzz run "$target" "$corpus" -- -max_total_time="$SECONDS_PER_TARGET" -rss_limit_mb=2048)
}

run validator document "$ROOT/validator/tests/data/bad" "$ROOT/validator/tests/data/good"
run validator tar_stream
run validator spdx "$ROOT/validator/fuzz/seeds/spdx"
run validator pkg_version "$ROOT/validator/fuzz/seeds/pkg_version"
for t in $(cd "$ROOT/ips-bridge/fuzz" && cargo +nightly fuzz list); do
	run ips-bridge "$t"
done
run registry-client www_authenticate "$ROOT/registry-client/fuzz/seeds/www_authenticate"
run trust evidence "$ROOT/trust/fuzz/seeds/evidence"
run registry http_request "$ROOT/registry/fuzz/seeds/http_request"
run worker-runtime unpack "$ROOT/worker-runtime/fuzz/seeds/unpack"
echo "==== fuzzing found nothing ===="
