#!/usr/bin/env bash
# CI step (scripts/test.sh): runs README.md's main command exactly as written there and checks
# what it printed and left behind, so the README and the demo cannot drift apart. Also checks
# that README's test command is the one .ci/run runs (this very run is that command).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

fail() {
	echo "check-readme: $*" >&2
	exit 1
}

# The one line of the first ```sh block after the heading that starts with $1.
readme_command() {
	awk -v h="$1" '
		index($0, h) == 1 { in_section = 1; next }
		in_section && /^```sh$/ { in_block = 1; next }
		in_block && /^```$/ { exit }
		in_block { print }
	' README.md
}

main_cmd=$(readme_command "## Try it")
test_cmd=$(readme_command "## Run the tests")
[[ -n $main_cmd && $main_cmd != *$'\n'* ]] || fail "README.md: the 'Try it' block must hold exactly one command, found: ${main_cmd:-nothing}"
[[ -n $test_cmd && $test_cmd != *$'\n'* ]] || fail "README.md: the 'Run the tests' block must hold exactly one command, found: ${test_cmd:-nothing}"
grep -qx "exec $test_cmd" .ci/run || fail ".ci/run does not run README.md's test command '$test_cmd'"

# The demo builds the default rdctl here, the one `cargo test` builds next, instead of its
# own no-s3 feature set (a second compile of most dependencies on a fresh machine); that
# feature set is checked by scripts/test.sh's clippy step.
export DEMO_DEFAULT_FEATURES=1
echo "running README.md's main command: $main_cmd"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
bash -c "$main_cmd" 2>&1 | tee "$out" || fail "'$main_cmd' failed (exit ${PIPESTATUS[0]})"

digest=$(sed -n 's/^image digest: *\(sha256:[0-9a-f]\{64\}\) .*/\1/p' "$out")
[[ -n $digest ]] || fail "no image digest printed"
root=$(sed -n 's/^worker root: *//p' "$out")
[[ -n $root && -x $root/usr/bin/hello && -f $root/etc/hello/hello.conf ]] || fail "worker root ${root:-(not printed)} is missing the example's files"
[[ $root/usr/bin/greet -ef $root/usr/bin/hello ]] || fail "$root/usr/bin/greet is not a hardlink of usr/bin/hello"
grep -qx 'validation: *passed' "$out" || fail "validation did not pass"
grep -q "^/.*/image:1.0: valid (0 error(s)" "$out" || fail "rdctl validate of the built layout did not report it valid"
registry=$(sed -n 's|^registry: http://\([0-9.:]*\) .*|\1|p' "$out")
depot=$(sed -n 's|^depot: http://\([0-9.:]*\)/$|\1|p' "$out")
[[ -n $registry && -n $depot ]] || fail "the registry and depot addresses were not printed"
# The demo must have stopped the servers it started: their ports no longer accept.
for addr in "$registry" "$depot"; do
	if (exec 3<>"/dev/tcp/${addr%:*}/${addr##*:}") 2>/dev/null; then
		fail "something still listens on $addr after the demo ended"
	fi
done
echo "check-readme: ok (image $digest, worker root $root, servers stopped)"
