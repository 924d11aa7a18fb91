#!/usr/bin/env bash
# The fleet cell (issue 52): N clients pull one blob at once (a fleet of workers starting the
# same image), against our registry with `sendfile` (the default), our registry writing from the
# mapping (`sendfile = false`, the path before it) and CNCF distribution v3, all on the
# filesystem store, A/B interleaved (the side that goes first rotates). The clients are `curl`,
# the cheapest there is, so the server's cost shows; the page cache is warm (one GET first).
# Per side and N: aggregate MiB/s (N × size / wall time) and server CPU seconds per GiB served
# (user + system, from /proc), median of the runs, and our ratio to v3. Then the same with real
# clients: FLEET_CRANE (default 8) concurrent `crane pull` of one image (one layer of FLEET_MIB
# MiB, gzip as crane appends it) into OCI layouts; FLEET_CRANE=0 leaves that out.
#
#   bench/fleet.sh                 256 MiB blob, N = 8 and 32, 3 runs
#   FLEET_MIB=64 FLEET_CLIENTS="8" BENCH_RUNS=5 bench/fleet.sh
# Output: a table on stdout and bench/out/fleet/results.jsonl. Fails only when something could
# not run, never on a number.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BENCH_PEERS="${BENCH_PEERS:-dist}"
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
MIB="${FLEET_MIB:-256}"
CLIENTS="${FLEET_CLIENTS:-8 32}"
CRANE_CLIENTS="${FLEET_CRANE:-8}"
CRANE="$ROOT/.tools/bin/crane"
[ "$CRANE_CLIENTS" = 0 ] || [ -x "$CRANE" ] || { echo "bench/fleet.sh: $CRANE is missing (scripts/install-deps.sh)" >&2; exit 1; }
RUNS="${BENCH_RUNS:-3}"
[ -n "${BENCH_NO_BUILD:-}" ] || cargo build --release -q -p rdctl
RDCTL="${RDCTL_BIN:-$ROOT/target/release/rdctl}"
check_peers
OUT="$ROOT/bench/out/fleet"
mkdir -p "$OUT"
: > "$OUT/results.jsonl"
bench_scratch rd-fleet

declare -A PORT PID
for side in ours ours-copy $BENCH_PEERS; do
	PORT[$side]=$(free_port)
	mkdir -p "$WORK/$side"
	case "$side" in
	ours) start_ours ours "${PORT[$side]}" --data "$WORK/$side" ;;
	ours-copy) RDCTL_REGISTRY_SENDFILE=false start_ours ours-copy "${PORT[$side]}" --data "$WORK/$side" ;;
	*) start_dist "$side" "$side" "${PORT[$side]}" "  filesystem:
    rootdirectory: $WORK/$side" ;;
	esac
	PID[$side]=$STARTED_PID
done

head -c $((MIB << 20)) /dev/urandom > "$WORK/blob"
DIGEST="sha256:$(sha256sum "$WORK/blob" | cut -d' ' -f1)"
for side in "${!PORT[@]}"; do
	base="http://127.0.0.1:${PORT[$side]}"
	loc=$(curl -sf -X POST -D - -o /dev/null "$base/v2/fleet/blob/blobs/uploads/" | tr -d '\r' | awk 'tolower($1)=="location:"{print $2}')
	case "$loc" in http*) ;; *) loc="$base$loc" ;; esac
	case "$loc" in *\?*) sep='&' ;; *) sep='?' ;; esac
	curl -sf -X PUT -H 'content-type: application/octet-stream' --data-binary @"$WORK/blob" "$loc${sep}digest=$DIGEST" -o /dev/null
	curl -sf -o /dev/null "$base/v2/fleet/blob/blobs/$DIGEST"
done
if [ "$CRANE_CLIENTS" != 0 ]; then
	mkdir -p "$WORK/rootfs"
	head -c $((MIB << 20)) /dev/urandom > "$WORK/rootfs/payload"
	tar -C "$WORK/rootfs" -cf "$WORK/layer.tar" payload
	for side in "${!PORT[@]}"; do
		"$CRANE" append --insecure -f "$WORK/layer.tar" -t "127.0.0.1:${PORT[$side]}/fleet/image:1" > /dev/null 2>> "$WORK/crane.log"
	done
fi

# pulls SIDE CLIENTS KIND: KIND clients (curl: GETs of the blob; crane: pulls of the image)
# at once; appends the cell to results.jsonl.
pulls() {
	local side=$1 clients=$2 kind=$3 cpu0 t0 t1 cpu p i
	local url="http://127.0.0.1:${PORT[$side]}/v2/fleet/blob/blobs/$DIGEST"
	rm -rf "$WORK/pulled"
	mkdir -p "$WORK/pulled"
	cpu0=$(cpu_secs "${PID[$side]}")
	t0=$(date +%s.%N)
	local -a running=()
	for i in $(seq "$clients"); do
		if [ "$kind" = curl ]; then
			curl -sf -o /dev/null "$url" &
		else
			"$CRANE" pull --insecure --format oci "127.0.0.1:${PORT[$side]}/fleet/image:1" "$WORK/pulled/$i" 2>> "$WORK/crane.log" &
		fi
		running+=($!)
	done
	for p in "${running[@]}"; do wait "$p"; done
	t1=$(date +%s.%N)
	cpu=$(cpu_since "${PID[$side]}" "$cpu0")
	printf '{"side":"%s","kind":"%s","clients":%d,"mib":%d,"run":%d,"secs":%.4f,"cpu":%.3f}\n' \
		"$side" "$kind" "$clients" "$MIB" "$run" "$(echo "$t1 - $t0" | bc -l)" "$cpu" >> "$OUT/results.jsonl"
}

SIDES="ours ours-copy $BENCH_PEERS"
for run in $(seq "$RUNS"); do
	read -ra sides <<< "$SIDES"
	n=${#sides[@]}
	for clients in $CLIENTS; do
		for ((i = 0; i < n; i++)); do
			side=${sides[$(((i + run) % n))]}
			pulls "$side" "$clients" curl
		done
	done
	if [ "$CRANE_CLIENTS" != 0 ]; then
		for ((i = 0; i < n; i++)); do
			pulls "${sides[$(((i + run) % n))]}" "$CRANE_CLIENTS" crane
		done
	fi
done

python3 - "$OUT/results.jsonl" "$SIDES" <<-'EOF'
	import json, statistics, sys
	rows = [json.loads(l) for l in open(sys.argv[1])]
	sides = sys.argv[2].split()
	print(f"fleet pull: one {rows[0]['mib']} MiB blob (curl) or a one-layer image (crane), filesystem store, median of {max(r['run'] for r in rows)} runs")
	print(f"{'clients':>11} {'side':<10} {'MiB/s':>9} {'CPU s/GiB':>10} {'MiB/s vs v3':>12} {'CPU vs v3':>10}")
	for kind, n in sorted({(r['kind'], r['clients']) for r in rows}, reverse=True):
	    med = {}
	    for s in sides:
	        cell = [r for r in rows if r['side'] == s and r['clients'] == n and r['kind'] == kind]
	        gib = n * cell[0]['mib'] / 1024
	        med[s] = (statistics.median(n * r['mib'] / r['secs'] for r in cell),
	                  statistics.median(r['cpu'] / gib for r in cell))
	    for s in sides:
	        rate, cpu = med[s]
	        vr, vc = med.get('dist', (rate, cpu))
	        print(f"{kind:>5} {n:>5} {s:<10} {rate:>9.0f} {cpu:>10.3f} {rate / vr:>11.2f}x {cpu / vc:>9.2f}x")
EOF
