#!/usr/bin/env bash
# Where a push or pull cell of bench/run.sh spends its CPU (issue 38: "cells behind their goal
# say what holds them back with a profile"). Starts one server on an empty store, runs one cell
# with rd-bench while `perf record -g` samples the server, and prints: throughput, the CPU
# seconds per GiB of the server, the load client and (on s3) SeaweedFS, the cores the three
# kept busy, and the server's hottest symbols.
#
#   bench/profile.sh SIDE STORE OP [MODE] [CONC] [SIZE_MIB] [TOTAL_MIB]
#     SIDE   ours | dist (distribution v3) | dist28 (distribution 2.8)
#     STORE  fs | s3 (one `weed server -s3`, as bench/run.sh starts it)
#     OP     push | pull (a pull first pushes the blobs monolithically, unprofiled), or
#            skopeo | crane: bench/run.sh's real-client cell, `skopeo copy` or `crane push` of
#            an OCI layout of two gzip layers of SIZE_MIB (default 256) each; then the profile
#            is the client's, not the server's (in that cell the client sets the pace)
#     MODE   mono | chunked | stream (push only; default stream)
#     CONC   clients (default 4); SIZE_MIB blob size (default 128); TOTAL_MIB (default 2048)
#
# Output: the report on stdout, and bench/out/profile/SIDE-STORE-OP-MODE-CONC.{perf,txt}.
# Needs `perf` (Debian's linux-perf) and the release binaries (RDCTL_BIN/BENCH_BIN, or
# target/release). Run on an otherwise idle machine: the cores-busy figure is the point.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
if [ $# -lt 3 ]; then
	sed -n '2,21p' "$0"
	exit 2
fi
SIDE=$1 STORE=$2 OP=$3 MODE=${4:-stream} CONC=${5:-4} SIZE_MIB=${6:-128} TOTAL_MIB=${7:-2048}
case "$SIDE" in ours | dist | dist28) ;; *) echo "bench/profile.sh: SIDE is ours, dist or dist28, not $SIDE" >&2; exit 2 ;; esac
case "$STORE" in fs | s3) ;; *) echo "bench/profile.sh: STORE is fs or s3, not $STORE" >&2; exit 2 ;; esac
case "$OP" in push | pull) ;; skopeo | crane) MODE=- CONC=1 SIZE_MIB=${6:-256} ;;
*) echo "bench/profile.sh: OP is push, pull, skopeo or crane, not $OP" >&2; exit 2 ;; esac
command -v perf > /dev/null || { echo "bench/profile.sh: perf is missing (apt-get install linux-perf)" >&2; exit 1; }
MiB=$((1 << 20))
RDCTL="${RDCTL_BIN:-$ROOT/target/release/rdctl}"
BENCH="${BENCH_BIN:-$ROOT/target/release/rd-bench}"
WEED="${WEED:-$ROOT/.tools/bin/weed}"
for b in "$RDCTL" "$BENCH"; do
	[ -x "$b" ] || { echo "bench/profile.sh: $b is missing (cargo build --release -p rdctl -p rd-bench)" >&2; exit 1; }
done
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_scratch rd-profile
OUT="$ROOT/bench/out/profile"
mkdir -p "$OUT"
name="$SIDE-$STORE-$OP-$MODE-$CONC"
port=$(free_port)
store_pid=""
if [ "$STORE" = fs ]; then
	mkdir -p "$WORK/data"
	fs_server "$SIDE" "$WORK/data" "$port"
else
	[ -x "$WEED" ] || { echo "bench/profile.sh: $WEED is missing; run scripts/install-deps.sh" >&2; exit 1; }
	weed_start
	store_pid=$WEED_PID
	bucket_new profile
	s3_server "$SIDE" "$S3URL" profile "$port"
fi
pid=$STARTED_PID
url="http://127.0.0.1:$port"
push() { # mode
	"$BENCH" push --url "$url" --repo bench/blobs --size $((SIZE_MIB * MiB)) --total $((TOTAL_MIB * MiB)) \
		--conc "$CONC" --mode "$1" --seed "$RANDOM" --digests "$WORK/digests"
}
if [ "$OP" = pull ]; then
	push mono > /dev/null
	MODE=-
fi
if [ "$OP" = skopeo ] || [ "$OP" = crane ]; then
	command -v skopeo > /dev/null || { echo "bench/profile.sh: skopeo is missing" >&2; exit 1; }
	CRANE="${CRANE:-$ROOT/.tools/bin/crane}"
	[ -x "$CRANE" ] || { echo "bench/profile.sh: $CRANE is missing; run scripts/install-deps.sh" >&2; exit 1; }
	img_bytes=$(make_image "$WORK/image" "$SIZE_MIB")
	TOTAL_MIB=$((img_bytes / MiB))
	client=(skopeo copy -q --dest-tls-verify=false "oci:$WORK/image:bench" "docker://127.0.0.1:$port/bench/image:v1")
	[ "$OP" = crane ] && client=("$CRANE" push --insecure "$WORK/image" "127.0.0.1:$port/bench/image:v1")
	c0=$(cpu_secs "$pid")
	s0=0
	[ -n "$store_pid" ] && s0=$(cpu_secs "$store_pid")
	t0=$(date +%s.%N)
	# /usr/bin/time under perf: perf samples the client (time's own cost is nil) and time
	# reports the client's CPU alone, without perf's.
	perf record -q -F 999 -g -o "$OUT/$name.perf" -- \
		/usr/bin/time -f '%U %S' -o "$WORK/client-time" "${client[@]}" > /dev/null 2> "$WORK/client.log" \
		|| { cat "$WORK/client.log" >&2; exit 1; }
	t1=$(date +%s.%N)
	server=$(cpu_since "$pid" "$c0")
	store=0
	[ -n "$store_pid" ] && store=$(cpu_since "$store_pid" "$s0")
	client_cpu=$(awk '{print $1 + $2}' "$WORK/client-time")
	{
		echo "# $OP to $SIDE, $STORE store, two ${SIZE_MIB} MiB gzip layers, $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)"
		awk -v b="$img_bytes" -v t="$(echo "$t1 - $t0" | bc -l)" -v srv="$server" -v cl="$client_cpu" -v st="$store" -v s3="$STORE" -v n="$(nproc)" 'BEGIN {
			gib = b / 1073741824
			printf "throughput %d MiB/s in %.2f s\n", b / t / 1048576, t
			printf "CPU s per GiB: server %.2f, client %.2f%s\n", srv / gib, cl / gib, (s3 == "s3" ? sprintf(", SeaweedFS %.2f", st / gib) : "")
			printf "cores busy: %.2f of %d\n", (srv + cl + st) / t, n
		}'
		echo
		echo "## the client's hottest symbols (perf report --no-children, self time)"
		perf report -i "$OUT/$name.perf" --no-children --sort dso,sym --percent-limit 1.5 --stdio 2> /dev/null \
			| grep -E '^ +[0-9.]+%' | head -25
	} | tee "$OUT/$name.txt"
	exit 0
fi
perf record -q -F 999 -g -p "$pid" -o "$OUT/$name.perf" 2> /dev/null &
perf_pid=$!
sleep 0.5
c0=$(cpu_secs "$pid")
s0=0
[ -n "$store_pid" ] && s0=$(cpu_secs "$store_pid")
if [ "$OP" = push ]; then
	r=$(push "$MODE")
else
	r=$("$BENCH" pull --url "$url" --repo bench/blobs --digests "$WORK/digests" --conc "$CONC")
fi
server=$(cpu_since "$pid" "$c0")
store=0
[ -n "$store_pid" ] && store=$(cpu_since "$store_pid" "$s0")
kill -INT "$perf_pid"
wait "$perf_pid" 2> /dev/null || true
{
	echo "# $SIDE, $STORE store, $OP ($MODE, $CONC clients, ${SIZE_MIB} MiB blobs, ${TOTAL_MIB} MiB), $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)"
	jq -r --argjson server "$server" --argjson store "$store" --arg s3 "$STORE" '
		(.bytes / 1073741824) as $gib |
		"throughput \(.mib_s | floor) MiB/s in \(.secs * 100 | floor / 100) s",
		"CPU s per GiB: server \($server / $gib * 100 | floor / 100), load client \(.client_cpu_s / $gib * 100 | floor / 100)"
			+ (if $s3 == "s3" then ", SeaweedFS \($store / $gib * 100 | floor / 100)" else "" end),
		"cores busy: \(($server + .client_cpu_s + $store) / .secs * 100 | floor / 100) of '"$(nproc)"'"' <<< "$r"
	echo
	echo "## the server's hottest symbols (perf report --no-children, self time)"
	perf report -i "$OUT/$name.perf" --no-children --sort dso,sym --percent-limit 1.5 --stdio 2> /dev/null \
		| grep -E '^ +[0-9.]+%' | head -25
} | tee "$OUT/$name.txt"
