#!/usr/bin/env bash
# The whole pipeline on the shipped example (examples/hello), on loopback, with embedded
# defaults: publish the IPS packages, serve them over the depot protocol, lock and build the
# image, start the registry on its filesystem store, push (and show the SBOM referrer the
# registry lists), run the worker once with the `dir` provisioner, validate, and print what
# happened. Every server it starts is stopped on exit,
# on failure and on ctrl-c; the results stay in the work directory (default target/demo,
# emptied first, or the first argument: a new or empty directory) for you to look at.
#
# Usage: scripts/demo.sh [WORK_DIR]
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
EXAMPLE="$ROOT/examples/hello"
WORK="${1:-$ROOT/target/demo}"
PIDS=()

cleanup() {
	local pid
	for pid in "${PIDS[@]}"; do
		kill -TERM "$pid" 2>/dev/null || true
	done
	for pid in "${PIDS[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	PIDS=()
}
trap cleanup EXIT
trap 'echo "demo: interrupted" >&2; exit 130' INT TERM

say() { printf '\n== %s\n' "$*"; }
fail() {
	echo "demo: FAILED: $*" >&2
	exit 1
}

# Waits until FILE has a line matching the sed expression EXPR and prints the match, or
# fails when PID exits first (the server could not start) or after 60 s.
wait_for() { # file pid sed-expr what
	local file=$1 pid=$2 expr=$3 what=$4 i out
	for ((i = 0; i < 600; i++)); do
		out=$(sed -n "$expr" "$file" | head -n1)
		if [[ -n $out ]]; then
			printf '%s' "$out"
			return 0
		fi
		kill -0 "$pid" 2>/dev/null || {
			cat "$file" >&2
			fail "$what exited before it was ready"
		}
		sleep 0.1
	done
	fail "$what did not start within 60 s (log: $file)"
}

# Without the default `s3` feature: the demo serves from the filesystem store, and leaving out
# aws-sdk-s3 and its crates cuts about a quarter of a cold build (docs/benchmarks.md, "First
# run"). `cargo build --bin rdctl` (default features) builds the rdctl that also has S3.
# DEMO_DEFAULT_FEATURES=1 builds the default rdctl instead: CI's README check sets it so the
# demo reuses the build the tests make rather than compiling a second feature set (without
# s3, hashbrown 0.17, hyper-rustls and time get other features, so they and every crate above
# them compile again), and checks the no-s3 build with clippy instead (scripts/test.sh).
if [[ -n ${DEMO_DEFAULT_FEATURES:-} ]]; then
	say "building rdctl (cargo build, default features)"
	cargo build --quiet --manifest-path "$ROOT/Cargo.toml" --bin rdctl
else
	say "building rdctl (cargo build --no-default-features)"
	cargo build --quiet --manifest-path "$ROOT/Cargo.toml" --bin rdctl --no-default-features
fi
RDCTL="$ROOT/target/debug/rdctl"

# target/demo is build output; a directory given as argument is emptied only when this script
# made it (it carries a marker), never when it holds someone's files.
if [[ $# -gt 0 && -e $WORK && ! -e $WORK/.rdctl-demo && -n $(ls -A "$WORK" 2>/dev/null) ]]; then
	fail "$WORK exists and is not a demo work directory; give an empty or new one"
fi
rm -rf "$WORK"
mkdir -p "$WORK"
touch "$WORK/.rdctl-demo"
WORK="$(cd "$WORK" && pwd)"
echo "work directory: $WORK"

say "1. publish examples/hello/manifests into an IPS file repository"
for m in "$EXAMPLE"/manifests/*.p5m; do
	"$RDCTL" ips lint "$m"
	printf 'published %s\n' "$("$RDCTL" ips publish --repo "$WORK/ips-repo" --publisher example.org --proto "$EXAMPLE/proto" "$m")"
done

say "2. serve the repository over the pkg(5) depot protocol"
"$RDCTL" ips serve --repo "$WORK/ips-repo" --listen 127.0.0.1:0 >"$WORK/depot.log" 2>&1 &
PIDS+=($!)
DEPOT=$(wait_for "$WORK/depot.log" "$!" 's/^listening on //p' "rdctl ips serve")
echo "depot: $DEPOT"
"$RDCTL" ips list "$DEPOT"

say "3. lock the image file against the depot, then build it"
mkdir -p "$WORK/image-src"
# The example's image file names a file repository; here the same packages come from the depot.
sed "s|^\"example.org\" = \"repo\"\$|\"example.org\" = \"$DEPOT\"|" "$EXAMPLE/image.toml" >"$WORK/image-src/image.toml"
grep -q "^\"example.org\" = \"$DEPOT\"\$" "$WORK/image-src/image.toml" || fail "could not point the image file at the depot"
"$RDCTL" lock "$WORK/image-src/image.toml"
# The depot must give exactly the packages the committed lockfile pins.
diff <(grep -E '"(fmri|manifestSha1)"' "$EXAMPLE/image.lock.json") \
	<(grep -E '"(fmri|manifestSha1)"' "$WORK/image-src/image.lock.json") ||
	fail "the depot resolved other packages than examples/hello/image.lock.json pins"
echo "locked packages match examples/hello/image.lock.json"
"$RDCTL" build "$WORK/image-src/image.toml" --output "$WORK/image" | tee "$WORK/build.out"
MANIFEST=$(sed -n 's/^image *//p' "$WORK/build.out")
[[ $MANIFEST == sha256:* ]] || fail "rdctl build printed no manifest digest"

say "4. start the registry on the filesystem store"
"$RDCTL" registry serve --listen 127.0.0.1:0 --data "$WORK/registry-data" >"$WORK/registry.log" 2>&1 &
PIDS+=($!)
REGISTRY=$(wait_for "$WORK/registry.log" "$!" 's/.*registry listening on \([0-9.:]*\).*/\1/p' "rdctl registry serve")
echo "registry: http://$REGISTRY (data in $WORK/registry-data)"

say "5. push the image, and with it its SBOM (a referrer of the image manifest)"
"$RDCTL" push "$WORK/image:1.0" "$REGISTRY/demo/hello:1.0"
SBOM=$(sed -n 's/^sbom *//p' "$WORK/build.out")
[[ $SBOM == sha256:* ]] || fail "rdctl build printed no SBOM digest"
echo "GET /v2/demo/hello/referrers/$MANIFEST:"
curl -fsS "http://$REGISTRY/v2/demo/hello/referrers/$MANIFEST" >"$WORK/referrers.json" ||
	fail "the registry's referrers API did not answer"
sed 's/^/  /' "$WORK/referrers.json"
echo
grep -q "\"$SBOM\"" "$WORK/referrers.json" || fail "the registry lists no SBOM referrer $SBOM of $MANIFEST"

say "6. run the worker once (dir provisioner)"
mkdir -p "$WORK/worker/zones"
cat >"$WORK/worker/worker.toml" <<EOF
zones_dir = "zones"
state_dir = "state"
worker_id = "demo"
[provisioner]
kind = "dir"
base = "zones-root"
EOF
cat >"$WORK/worker/zones/hello.toml" <<EOF
name = "hello"
image = "$REGISTRY/demo/hello:1.0"
EOF
"$RDCTL" worker run --once --config "$WORK/worker/worker.toml" 2>"$WORK/worker.log" ||
	{
		cat "$WORK/worker.log" >&2
		fail "the worker pass failed"
	}
"$RDCTL" worker status --config "$WORK/worker/worker.toml"
ZONE_ROOT="$WORK/worker/zones-root/hello/root"
[[ -x $ZONE_ROOT/usr/bin/hello ]] || fail "no $ZONE_ROOT/usr/bin/hello"
CURRENT=$("$RDCTL" worker status --json --config "$WORK/worker/worker.toml" |
	sed -n 's/.*"current_digest": "\(sha256:[0-9a-f]*\)".*/\1/p')
[[ $CURRENT == "$MANIFEST" ]] || fail "the zone runs $CURRENT, not the built $MANIFEST"

say "7. validate: the built layout, and the image pulled back from the registry"
"$RDCTL" validate "$WORK/image:1.0"
"$RDCTL" pull "$REGISTRY/demo/hello:1.0" "$WORK/pulled"
"$RDCTL" validate "$WORK/pulled:1.0"

say "done"
cat <<EOF
image digest:   $MANIFEST  ($REGISTRY/demo/hello:1.0)
SBOM referrer:  $SBOM  (GET /v2/demo/hello/referrers/$MANIFEST)
OCI layout:     $WORK/image
registry data:  $WORK/registry-data
worker root:    $ZONE_ROOT
  $(ls -l "$ZONE_ROOT/etc/hello/hello.conf" | awk '{print $1, $3, $4, $NF}')
  usr/bin/greet is a hardlink of usr/bin/hello: $([[ $ZONE_ROOT/usr/bin/greet -ef $ZONE_ROOT/usr/bin/hello ]] && echo yes || echo NO)
  usr/bin/hello-server -> $(readlink "$ZONE_ROOT/usr/bin/hello-server")
  hello user: $(grep '^hello:' "$ZONE_ROOT/etc/passwd")
validation:     passed
EOF
