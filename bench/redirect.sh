#!/usr/bin/env bash
# Pulls from our registry on SeaweedFS with and without `s3_redirect` (issue 38): one image
# with one layer of SIZE_MIB random bytes, pulled RUNS times by crane and by rdctl from each
# registry, interleaved (off, on, off, on...). Prints the median wall time of each cell, and
# the registry's CPU time (user+system from /proc/PID/stat) and its response bytes
# (registry_http_response_bytes_total) per pull.
#
# Usage: bench/redirect.sh [SIZE_MIB (128)] [RUNS (5)]
# Env:   RDCTL (default target/release/rdctl, else target/debug/rdctl), WEED, CRANE.
# Needs: .tools/bin/weed, crane, curl, python3.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
SIZE_MIB="${1:-128}"
RUNS="${2:-5}"
RDCTL="${RDCTL:-$([ -x "$ROOT/target/release/rdctl" ] && echo "$ROOT/target/release/rdctl" || echo "$ROOT/target/debug/rdctl")}"
WEED="${WEED:-$ROOT/.tools/bin/weed}"
CRANE="${CRANE:-$(command -v crane || echo "$ROOT/.tools/bin/crane")}"
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_scratch rd-redirect

log() { echo "redirect.sh: $*" >&2; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
sent() { curl -s "http://127.0.0.1:$1/metrics" | awk '/^registry_http_response_bytes_total/{print $2}'; }

weed_start
bucket_new redirect-bench
declare -A PORT PID
for mode in off on; do
	PORT[$mode]=$(free_port)
	export RDCTL_REGISTRY_S3_REDIRECT=$([ $mode = on ] && echo true || echo false)
	start_ours "ours-$mode" "${PORT[$mode]}" --s3-endpoint "$S3URL" --s3-bucket redirect-bench
	PID[$mode]=$STARTED_PID
done

log "pushing one layer of $SIZE_MIB MiB"
mkdir -p "$WORK/layer/opt"
head -c $((SIZE_MIB << 20)) /dev/urandom > "$WORK/layer/opt/data.bin"
tar -C "$WORK/layer" -cf "$WORK/layer.tar" opt
"$CRANE" append --platform illumos/amd64 -f "$WORK/layer.tar" -t "127.0.0.1:${PORT[off]}/bench/img:v1" > /dev/null 2>&1

declare -A T C B
for run in $(seq "$RUNS"); do
	for mode in off on; do
		for client in crane rdctl; do
			out="$WORK/out-$mode-$client-$run"
			ref="127.0.0.1:${PORT[$mode]}/bench/img:v1"
			c0=$(cpu_ticks "${PID[$mode]}")
			b0=$(sent "${PORT[$mode]}")
			t0=$(date +%s.%N)
			if [ $client = crane ]; then
				"$CRANE" pull --format=oci "$ref" "$out" > /dev/null
			else
				"$RDCTL" pull "$ref" "$out" > /dev/null
			fi
			t1=$(date +%s.%N)
			c1=$(cpu_ticks "${PID[$mode]}")
			b1=$(sent "${PORT[$mode]}")
			rm -rf "$out"
			T[$mode-$client]+="$(echo "$t1 - $t0" | bc -l) "
			C[$mode-$client]+="$(((c1 - c0) * 1000 / $(getconf CLK_TCK))) "
			B[$mode-$client]+="$((b1 - b0)) "
		done
	done
done

median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%.2f", m}'; }
echo "| client | s3_redirect | median pull (s) | MiB/s | registry CPU per pull (ms) | registry response bytes per pull |"
echo "|---|---|---|---|---|---|"
for client in crane rdctl; do
	for mode in off on; do
		k=$mode-$client
		t=$(echo "${T[$k]}" | median)
		echo "| $client | $mode | $t | $(echo "$SIZE_MIB / $t" | bc -l | xargs printf '%.0f') | $(echo "${C[$k]}" | median | xargs printf '%.0f') | $(echo "${B[$k]}" | median | xargs printf '%.0f') |"
	done
done
echo
echo "rdctl: $RDCTL; SeaweedFS $("$WEED" version 2>&1 | head -1 | awk '{print $3}'); crane $("$CRANE" version); $RUNS runs per cell, interleaved; $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg) at the end; $(date -u +%Y-%m-%d)."
