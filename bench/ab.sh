#!/usr/bin/env bash
# Same-run A/B of two rdctl builds on the filesystem store: did a change make pushes, pulls or
# small-image pushes slower? Never part of `cargo test`; fails only when something could not run.
#
#   RDCTL_BEFORE=/path/to/old/rdctl bench/ab.sh [--runs 5]
#
# RDCTL_BEFORE is the build to compare with (e.g. `git worktree add /tmp/before REV` and
# `cargo build --release -p rdctl` there); RDCTL_BIN (default target/release/rdctl) the new one,
# BENCH_BIN rd-bench (default target/release/rd-bench; both built unless BENCH_NO_BUILD=1).
# Each run starts a fresh server of each build on an empty directory, in alternating order, and
# measures with the same rd-bench client:
#   push 1 MiB blobs, 64 MiB per run, x1 and x4 clients, monolithic and chunked (as bench/run.sh)
#   pull of what the monolithic x4 push wrote
#   push-images: 40 small images (a config, 3 layers, a manifest PUT each; every 5th untagged)
#                with 8 in flight: the manifest PUT's holds, links and tag writes
# and prints the medians of both builds and new/before (above 1: the new build is faster), with
# the server CPU seconds per cell. Results also go to bench/out/ab/results.jsonl.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
RUNS=5
while [ $# -gt 0 ]; do
	case "$1" in
	--runs) RUNS=$2; shift 2 ;;
	*) echo "bench/ab.sh: unknown argument $1" >&2; exit 2 ;;
	esac
done
BEFORE="${RDCTL_BEFORE:?bench/ab.sh: set RDCTL_BEFORE to the rdctl build to compare with}"
[ -x "$BEFORE" ] || { echo "bench/ab.sh: $BEFORE is not an executable" >&2; exit 1; }
[ -n "${BENCH_NO_BUILD:-}" ] || cargo build --release -q -p rdctl -p rd-bench
RDCTL="${RDCTL_BIN:-$ROOT/target/release/rdctl}"
BENCH="${BENCH_BIN:-$ROOT/target/release/rd-bench}"
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_scratch ab
OUT="$ROOT/bench/out/ab"
mkdir -p "$OUT"
RESULTS="$OUT/results.jsonl"
: > "$RESULTS"
MiB=$((1024 * 1024))

# serve SIDE DIR PORT: our registry of that build on DIR; sets STARTED_PID.
serve() {
	local bin=$RDCTL
	[ "$1" = before ] && bin=$BEFORE
	RDCTL="$bin" start_ours "ab-$1" "$3" --data "$2"
}

record() { # cell side run json cpu
	jq -c --arg cell "$1" --arg side "$2" --argjson run "$3" --argjson cpu "$5" \
		'. + {cell: $cell, side: $side, run: $run, server_cpu_s: $cpu}' <<< "$4" >> "$RESULTS"
}

seed=0
for run in $(seq "$RUNS"); do
	sides="new before"
	[ $((run % 2)) -eq 0 ] && sides="before new"
	for side in $sides; do
		dir="$WORK/data-$side"
		rm -rf "$dir" && mkdir -p "$dir"
		port=$(free_port)
		serve "$side" "$dir" "$port"
		pid=$STARTED_PID
		url="http://127.0.0.1:$port"
		for conc in 1 4; do
			for mode in mono chunked; do
				seed=$((seed + 1))
				c0=$(cpu_secs "$pid")
				r=$("$BENCH" push --url "$url" --repo ab/blobs --size "$MiB" --total $((64 * MiB)) \
					--conc "$conc" --mode "$mode" --seed "$seed" --digests "$WORK/digests-$side")
				record "push ${mode} x$conc" "$side" "$run" "$r" "$(cpu_since "$pid" "$c0")"
			done
		done
		c0=$(cpu_secs "$pid")
		r=$("$BENCH" pull --url "$url" --repo ab/blobs --digests "$WORK/digests-$side" --conc 4)
		record "pull x4" "$side" "$run" "$r" "$(cpu_since "$pid" "$c0")"
		seed=$((seed + 1))
		c0=$(cpu_secs "$pid")
		r=$("$BENCH" push-images --url "$url" --prefix ab/img --repos 4 --manifests 10 --layers 3 \
			--untagged-every 5 --conc 8 --seed "ab$seed")
		record "push-images x8" "$side" "$run" "$r" "$(cpu_since "$pid" "$c0")"
		stop_pid "$pid"
		rm -rf "$dir"
	done
	echo "bench/ab.sh: run $run of $RUNS done" >&2
done

# The table: per cell, the median rate of each side (MiB/s, or images/s) and new/before.
jq -rs '
  def med: sort | if length == 0 then null else .[(length - 1) / 2 | floor] end;
  def rate: if .mib_s then .mib_s else .images_per_sec end;
  group_by(.cell)[] as $g
  | ($g | map(select(.side == "new") | rate) | med) as $n
  | ($g | map(select(.side == "before") | rate) | med) as $b
  | ($g | map(select(.side == "new") | .server_cpu_s) | med) as $nc
  | ($g | map(select(.side == "before") | .server_cpu_s) | med) as $bc
  | "| \($g[0].cell) | \($n * 10 | round / 10) | \($b * 10 | round / 10) | \(($n / $b) * 100 | round / 100)× | \($nc * 100 | round / 100) / \($bc * 100 | round / 100) |"
' "$RESULTS" | {
	echo "| cell | new | before | new/before | server CPU s new / before |"
	echo "|---|---|---|---|---|"
	cat
}
