#!/usr/bin/env bash
# The benchmark harness (issue 9): our parts against the peers users would pick instead, on the
# same work in the same run, A/B interleaved (the side that goes first alternates), min/median/max
# and the ratio of medians. Benchmarks never fail on a number; this script fails only when
# something could not run.
#
#   bench/run.sh [--quick]      --quick: about 10 minutes on 2 cores; full: under an hour
#
# Work:
#   fs      our registry (filesystem store) vs CNCF distribution v3 and 2.8 (filesystem driver):
#           push of TOTAL bytes in blobs of 1, 32, 256 MiB with 1 and 4 clients, monolithic and
#           chunked; pull of the same; manifest HEAD/GET and tag list at 64 connections;
#           peak RSS (VmHWM) of each server per operation.
#   push    the pattern skopeo, podman, crane and docker push with: POST, one PATCH streamed
#           with `Transfer-Encoding: chunked` (no Content-Length, 32 KiB chunks), PUT; 128 MiB
#           blobs, 1 and 4 clients, on the filesystem store (and on SeaweedFS with `s3`); then
#           a real `skopeo copy` and `crane push` of a 512 MiB image (two 256 MiB layers, OCI
#           layout source) to both registries, timed.
#   s3      both registries on the same SeaweedFS (distribution's s3 driver): push and pull
#           throughput, and S3 requests per registry operation counted at a proxy.
#   fleet   bench/fleet.sh: 8 and 32 `curl` clients pull one 256 MiB blob at once, and 8
#           `crane pull` of a one-layer image, from our registry (with `sendfile` and with the
#           mapped copy) and distribution v3, filesystem store: aggregate MiB/s, server CPU/GiB.
#   hash    validator::Digester sha256 rate vs `openssl speed -evp sha256` (the CPU's limit),
#           per CPU second (openssl's default divisor) and per wall-clock second (-elapsed).
#   builder, worker: bench/builder.sh and bench/worker.sh, when present.
# The load client is `rd-bench` (bench/src/main.rs), the same binary against every server.
# Output: bench/out/run/results.jsonl (raw), then bench/report.py writes the tables and PNG
# plots into docs/benchmarks.md (between the run.sh markers) and docs/bench/*.png.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
QUICK=0
for a in "$@"; do
	case "$a" in
	--quick) QUICK=1 ;;
	-h | --help) sed -n '2,29p' "$0"; exit 0 ;;
	*) echo "bench/run.sh: unknown argument $a (usage: bench/run.sh [--quick])" >&2; exit 2 ;;
	esac
done
cd "$ROOT"
# BENCH_RUNS, BENCH_ONLY (a subset of "fs push small fleet s3 hash parts"; "pull" alone runs only the
# monolithic pushes that seed the pulls and the pulls, on fs and SeaweedFS), BENCH_FS_SIZES and
# BENCH_S3_SIZES (MiB, e.g. "32"; empty: none), BENCH_FS_TOTAL_MIB and BENCH_S3_COUNT=0 (no
# request counting) narrow a run; docs/benchmarks.md says which were set. BENCH_DOC writes the
# report into another file than docs/benchmarks.md, and its figures into a bench/ folder
# beside it (a narrowed run's report has only its sections).
RUNS="${BENCH_RUNS:-5}"
ONLY=" ${BENCH_ONLY:-fs push small fleet s3 hash parts} "
want() { [[ "$ONLY" == *" $1 "* ]]; }
MiB=$((1 << 20))
if [ "$QUICK" = 1 ]; then
	FS_TOTAL=$((256 * MiB)); FS_SIZES="1 32 256"; SMALL_SECS=3
	S3_TOTAL=$((256 * MiB)); S3_SIZES="32"; HASH_MIB=512
else
	FS_TOTAL=$((1024 * MiB)); FS_SIZES="1 32 256"; SMALL_SECS=10
	S3_TOTAL=$((512 * MiB)); S3_SIZES="1 32 256"; HASH_MIB=2048
fi
FS_SIZES="${BENCH_FS_SIZES:-$FS_SIZES}"
S3_SIZES="${BENCH_S3_SIZES-$S3_SIZES}"
# The streamed-PATCH push (section push): 128 MiB blobs, as issue 21 measured it.
PUSH_SIZE=$((128 * MiB))
PUSH_TOTAL=$(( (QUICK ? 256 : 512) * MiB ))
# The image `skopeo copy` and `crane push` send: two layers of this many MiB.
CLIENT_LAYER_MIB=256
FS_TOTAL=$(( ${BENCH_FS_TOTAL_MIB:-$((FS_TOTAL / MiB))} * MiB ))
OUT="$ROOT/bench/out/run"
mkdir -p "$OUT"
RESULTS="$OUT/results.jsonl"
: > "$RESULTS"
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_scratch rd-bench
log() { printf '[%s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

# --- peers ----------------------------------------------------------------------------------
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
missing=()
CRANE="${CRANE:-$ROOT/.tools/bin/crane}"
for pair in docker-registry:docker-registry pigz:pigz skopeo:skopeo umoci:umoci openssl:openssl jq:jq curl:curl; do
	command -v "${pair%%:*}" > /dev/null || missing+=("${pair#*:}")
done
if [ "${#missing[@]}" -gt 0 ]; then
	log "installing ${missing[*]} from Debian"
	$SUDO apt-get install -y --no-install-recommends "${missing[@]}"
fi
check_peers
WEED="${WEED:-$ROOT/.tools/bin/weed}"
[ -x "$WEED" ] || { echo "bench/run.sh: $WEED missing; run scripts/install-deps.sh" >&2; exit 1; }
PY="$ROOT/.tools/venv/bin/python"
[ -x "$PY" ] || { echo "bench/run.sh: $PY missing; run scripts/install-deps.sh" >&2; exit 1; }
if ! "$PY" -c 'import matplotlib' 2> /dev/null; then
	log "installing matplotlib into .tools/venv"
	"$PY" -m pip install -q 'matplotlib==3.11.2'
fi
log "building rdctl and rd-bench (release)"
[ -n "${BENCH_NO_BUILD:-}" ] || cargo build --release -q -p rdctl -p rd-bench
# RDCTL_BIN and BENCH_BIN run those binaries instead (with BENCH_NO_BUILD=1, nothing is built).
RDCTL="${RDCTL_BIN:-$ROOT/target/release/rdctl}"
BENCH="${BENCH_BIN:-$ROOT/target/release/rd-bench}"

# --- machine line -----------------------------------------------------------------------------
{
	echo "{\"section\":\"machine\",\"quick\":$QUICK,\"runs\":$RUNS,\"date\":\"$(date -u +%FT%TZ)\","
	echo "\"cpu\":$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //' | jq -R .),"
	echo "\"cores\":$(nproc),\"kernel\":\"$(uname -r)\",\"mem_gib\":$(awk '/MemTotal/{printf "%d", $2/1048576}' /proc/meminfo),"
	echo "\"rustc\":$(rustc --version | jq -R .),\"peers\":\"$BENCH_PEERS\","
	echo "\"distribution\":$(dist_version dist | jq -R .),\"distribution28\":$(dist_version dist28 | jq -R .),"
	echo "\"weed\":$("$WEED" version 2>&1 | head -1 | jq -R .),\"openssl\":$(openssl version | jq -R .),"
	echo "\"load_start\":\"$(cut -d' ' -f1-3 /proc/loadavg)\"}"
} | jq -c . >> "$RESULTS"

# --- helpers (servers, ports and peak RSS are in bench/lib.sh) ---------------------------------

# record SECTION SERVER RUN RSS_KIB JSON [CPU_SECS [STORE_CPU_SECS]]: CPU_SECS is the server's
# CPU time for the operation (cpu_secs after minus before), STORE_CPU_SECS SeaweedFS's (the one
# `weed server` process) in the s3 cells. The load client reports its own (client_cpu_s).
record() {
	jq -c --arg s "$1" --arg v "$2" --argjson r "$3" --argjson rss "${4:-null}" --argjson cpu "${6:-null}" \
		--argjson store "${7:-null}" \
		'. + {section: $s, server: $v, run: $r, rss_kib: $rss, server_cpu_s: $cpu, store_cpu_s: $store}' <<< "$5" >> "$RESULTS"
}

# --- fs: blob push and pull ------------------------------------------------------------------
seed=0
FS_MODES="mono chunked"
want fs || FS_MODES=mono
want_blobs() { want fs || want pull; }
want_blobs && log "fs: blob push/pull, $((FS_TOTAL / MiB)) MiB per run, $RUNS runs per cell"
want_blobs && for size in $FS_SIZES; do
	for conc in 1 4; do
		for mode in $FS_MODES; do
			for run in $(seq "$RUNS"); do
				for srv in $(order "$run"); do
					seed=$((seed + 1))
					dir="$WORK/data-$srv"
					rm -rf "$dir" && mkdir -p "$dir"
					port=$(free_port)
					fs_server "$srv" "$dir" "$port"
					pid=$STARTED_PID
					url="http://127.0.0.1:$port"
					c0=$(cpu_secs "$pid")
					r=$("$BENCH" push --url "$url" --repo bench/blobs --size $((size * MiB)) \
						--total "$FS_TOTAL" --conc "$conc" --mode "$mode" --seed "$seed" \
						--digests "$WORK/digests")
					record fs "$srv" "$run" "$(hwm "$pid")" "$r" "$(cpu_since "$pid" "$c0")"
					if [ "$mode" = mono ]; then
						reset_hwm "$pid"
						c0=$(cpu_secs "$pid")
						r=$("$BENCH" pull --url "$url" --repo bench/blobs --digests "$WORK/digests" --conc "$conc")
						record fs "$srv" "$run" "$(hwm "$pid")" "$r" "$(cpu_since "$pid" "$c0")"
					fi
					stop_pid "$pid"
					rm -rf "$dir"
				done
			done
			log "fs: ${size} MiB x$conc $mode done"
		done
	done
done

# --- push: the clients' pattern (one streamed PATCH) and real clients ---------------------------
want push && log "push: streamed PATCH, $((PUSH_SIZE / MiB)) MiB blobs, $((PUSH_TOTAL / MiB)) MiB per run"
want push && for conc in 1 4; do
	for run in $(seq "$RUNS"); do
		for srv in $(order "$run"); do
			seed=$((seed + 1))
			dir="$WORK/data-$srv"
			rm -rf "$dir" && mkdir -p "$dir"
			port=$(free_port)
			fs_server "$srv" "$dir" "$port"
			pid=$STARTED_PID
			c0=$(cpu_secs "$pid")
			r=$("$BENCH" push --url "http://127.0.0.1:$port" --repo bench/blobs --size "$PUSH_SIZE" \
				--total "$PUSH_TOTAL" --conc "$conc" --mode stream --seed "$seed" --digests "$WORK/digests")
			record fs "$srv" "$run" "$(hwm "$pid")" "$r" "$(cpu_since "$pid" "$c0")"
			stop_pid "$pid"
			rm -rf "$dir"
		done
	done
	log "push: stream x$conc done"
done

if want push; then
	[ -x "$CRANE" ] || { echo "bench/run.sh: $CRANE missing; run scripts/install-deps.sh" >&2; exit 1; }
	log "push: skopeo copy and crane push of a $((2 * CLIENT_LAYER_MIB)) MiB image"
	IMG="$WORK/image"
	IMG_BYTES=$(make_image "$IMG" "$CLIENT_LAYER_MIB")
	for client in skopeo crane; do
		for run in $(seq "$RUNS"); do
			for srv in $(order "$run"); do
				dir="$WORK/data-$srv"
				rm -rf "$dir" && mkdir -p "$dir"
				port=$(free_port)
				fs_server "$srv" "$dir" "$port"
				pid=$STARTED_PID
				c0=$(cpu_secs "$pid")
				t0=$(date +%s.%N)
				if [ "$client" = skopeo ]; then
					skopeo copy -q --dest-tls-verify=false "oci:$IMG:bench" "docker://127.0.0.1:$port/bench/image:v1" > /dev/null
				else
					"$CRANE" push --insecure "$IMG" "127.0.0.1:$port/bench/image:v1" > /dev/null 2>&1
				fi
				t1=$(date +%s.%N)
				record clients "$srv" "$run" "$(hwm "$pid")" "$(jq -c -n --arg c "$client" --argjson b "$IMG_BYTES" \
					--argjson s "$(echo "$t1 - $t0" | bc -l)" \
					'{op: "push", client: $c, bytes: $b, secs: $s, mib_s: ($b / $s / 1048576)}')" \
					"$(cpu_since "$pid" "$c0")"
				stop_pid "$pid"
				rm -rf "$dir"
			done
		done
		log "push: $client done"
	done
	rm -rf "$IMG"
fi

# --- fs: small requests ----------------------------------------------------------------------
declare -A SURL SPID
want small && log "fs: manifest HEAD/GET and tag list at 64 connections, ${SMALL_SECS}s per run"
want small && for srv in $SERVERS; do
	dir="$WORK/small-$srv"
	mkdir -p "$dir"
	port=$(free_port)
	fs_server "$srv" "$dir" "$port"
	SPID[$srv]=$STARTED_PID
	SURL[$srv]="http://127.0.0.1:$port"
	"$BENCH" seed-small --url "${SURL[$srv]}" --repo bench/small --tags 100 > /dev/null
done
want small && for kind in head get tags; do
	for run in $(seq "$RUNS"); do
		for srv in $(order "$run"); do
			reset_hwm "${SPID[$srv]}"
			r=$("$BENCH" small --url "${SURL[$srv]}" --repo bench/small --kind "$kind" --conns 64 --secs "$SMALL_SECS")
			record fs-small "$srv" "$run" "$(hwm "${SPID[$srv]}")" "$r"
		done
	done
	log "fs: small $kind done"
done
want small && for srv in $SERVERS; do stop_pid "${SPID[$srv]}"; done

# --- s3: both registries on one SeaweedFS ----------------------------------------------------
if want s3 || want pull; then
log "s3: starting SeaweedFS"
weed_start

log "s3: push/pull, $((S3_TOTAL / MiB)) MiB per run"
for size in $S3_SIZES; do
	for conc in 1 4; do
		for run in $(seq "$RUNS"); do
			for srv in $(order "$run"); do
				seed=$((seed + 1))
				b="b$seed$srv"
				bucket_new "$b"
				port=$(free_port)
				s3_server "$srv" "$S3URL" "$b" "$port"
				pid=$STARTED_PID
				url="http://127.0.0.1:$port"
				c0=$(cpu_secs "$pid"); w0=$(cpu_secs "$WEED_PID")
				r=$("$BENCH" push --url "$url" --repo bench/blobs --size $((size * MiB)) \
					--total "$S3_TOTAL" --conc "$conc" --mode mono --seed "$seed" --digests "$WORK/digests")
				record s3 "$srv" "$run" "$(hwm "$pid")" "$r" "$(cpu_since "$pid" "$c0")" "$(cpu_since "$WEED_PID" "$w0")"
				reset_hwm "$pid"
				c0=$(cpu_secs "$pid"); w0=$(cpu_secs "$WEED_PID")
				r=$("$BENCH" pull --url "$url" --repo bench/blobs --digests "$WORK/digests" --conc "$conc")
				record s3 "$srv" "$run" "$(hwm "$pid")" "$r" "$(cpu_since "$pid" "$c0")" "$(cpu_since "$WEED_PID" "$w0")"
				stop_pid "$pid"
				bucket_drop "$b"
			done
		done
		log "s3: ${size} MiB x$conc done"
	done
done

want push && for conc in 1 4; do
	for run in $(seq "$RUNS"); do
		for srv in $(order "$run"); do
			seed=$((seed + 1))
			b="p$seed$srv"
			bucket_new "$b"
			port=$(free_port)
			s3_server "$srv" "$S3URL" "$b" "$port"
			pid=$STARTED_PID
			c0=$(cpu_secs "$pid"); w0=$(cpu_secs "$WEED_PID")
			r=$("$BENCH" push --url "http://127.0.0.1:$port" --repo bench/blobs --size "$PUSH_SIZE" \
				--total "$PUSH_TOTAL" --conc "$conc" --mode stream --seed "$seed" --digests "$WORK/digests")
			record s3 "$srv" "$run" "$(hwm "$pid")" "$r" "$(cpu_since "$pid" "$c0")" "$(cpu_since "$WEED_PID" "$w0")"
			stop_pid "$pid"
			bucket_drop "$b"
		done
	done
	log "s3: stream x$conc done"
done

if want s3 && [ "${BENCH_S3_COUNT:-1}" != 0 ]; then
log "s3: requests per operation, counted at the s3-fixtures proxy"
coproc PROXY { exec "$BENCH" s3proxy --upstream "127.0.0.1:$WS"; }
PIDS+=("$PROXY_PID")
read -r PROXY_URL <&"${PROXY[0]}"
proxy_cmd() { echo "$1" >&"${PROXY[1]}"; local line; read -r line <&"${PROXY[0]}"; echo "$line"; }
declare -A CURL CPID
for srv in $SERVERS; do
	seed=$((seed + 1))
	b="c$seed$srv"
	bucket_new "$b"
	port=$(free_port)
	s3_server "$srv" "$PROXY_URL" "$b" "$port"
	CPID[$srv]=$STARTED_PID
	CURL[$srv]="http://127.0.0.1:$port"
done
# count SERVER LABEL N CMD... : S3 requests of CMD, divided by N registry operations.
count() {
	local srv=$1 label=$2 n=$3
	shift 3
	proxy_cmd reset > /dev/null
	"$@" > "$WORK/count.out"
	local c
	c=$(proxy_cmd counts)
	[ "$n" = requests ] && n=$(jq .requests "$WORK/count.out")
	record s3-count "$srv" 0 null "$(jq -c -n --arg l "$label" --argjson n "$n" --argjson c "$c" \
		'{op: $l, ops: $n, counts: $c, total: ([$c[]] | add // 0)}')"
}
for srv in $SERVERS; do
	u="${CURL[$srv]}"
	for spec in "1 mono" "32 mono" "32 chunked" "256 mono"; do
		set -- $spec
		seed=$((seed + 1))
		count "$srv" "push $1 MiB $2" 4 "$BENCH" push --url "$u" --repo bench/count --size $(($1 * MiB)) \
			--total $((4 * $1 * MiB)) --mode "$2" --chunk $((8 * MiB)) --seed "$seed" --digests "$WORK/digests"
		[ "$2" = mono ] && count "$srv" "pull $1 MiB" 4 "$BENCH" pull --url "$u" --repo bench/count --digests "$WORK/digests"
	done
	count "$srv" "manifest PUT (tag)" 20 "$BENCH" seed-small --url "$u" --repo bench/count --tags 20
	for kind in head get tags; do
		count "$srv" "small $kind" requests "$BENCH" small --url "$u" --repo bench/count --kind "$kind" --conns 1 --secs 1 --warmup 0
	done
done
for srv in $SERVERS; do stop_pid "${CPID[$srv]}"; done
stop_pid "$PROXY_PID"
fi
stop_pid "$WEED_PID"
fi

# --- fleet (bench/fleet.sh, with this run's binary and runs) -----------------------------------
if want fleet; then
	log "fleet: bench/fleet.sh"
	# Its peers are v3 only (2.8 is not a fleet peer); its rows join this run's results.
	BENCH_NO_BUILD=1 RDCTL_BIN="$RDCTL" BENCH_RUNS="$RUNS" BENCH_PEERS=dist bench/fleet.sh >&2
	jq -c '. + {section: "fleet"}' "$ROOT/bench/out/fleet/results.jsonl" >> "$RESULTS"
fi

# --- hashing -------------------------------------------------------------------------------
want hash && log "hash: Digester vs openssl speed -evp sha256"
want hash && for run in $(seq "$RUNS"); do
	r=$("$BENCH" hash --mib "$HASH_MIB" --passes 1)
	record hash ours "$run" null "$r"
	# 256 KiB blocks: the buffer size the registry and validator hash in. By default openssl
	# divides by the CPU user time it used, -elapsed by wall-clock time; rd-bench reports both
	# (mb_s per CPU second, mb_s_wall), so each is compared with its like. Comparing rd-bench's
	# wall-clock rate with openssl's CPU-time rate made hashing look 4x slow at load 28.
	kbs=$(openssl speed -evp sha256 -bytes 262144 -seconds 3 2> /dev/null | awk '/^sha256/{print $2}' | tr -d k)
	kbw=$(openssl speed -elapsed -evp sha256 -bytes 262144 -seconds 3 2> /dev/null | awk '/^sha256/{print $2}' | tr -d k)
	record hash openssl "$run" null "$(jq -c -n --argjson k "$kbs" --argjson w "$kbw" \
		'{op: "hash", mb_s: ($k / 1000), mb_s_wall: ($w / 1000)}')"
done

# --- builder and worker (other scripts) ------------------------------------------------------
want parts && for part in builder worker; do
	if [ -x "bench/$part.sh" ]; then
		log "$part: bench/$part.sh"
		# --no-docs: report.py puts their tables in the generated block; on their own they
		# would append a second copy of their section to docs/benchmarks.md.
		if [ "$QUICK" = 1 ]; then bench/$part.sh --quick --no-docs; else bench/$part.sh --no-docs; fi
	else
		log "$part: bench/$part.sh is missing; its rows stay empty"
		echo "{\"section\":\"missing\",\"part\":\"$part\"}" >> "$RESULTS"
	fi
done

echo "{\"section\":\"machine-end\",\"load_end\":\"$(cut -d' ' -f1-3 /proc/loadavg)\",\"date\":\"$(date -u +%FT%TZ)\"}" >> "$RESULTS"
# With BENCH_DOC the figures go next to that file (its bench/ folder), so a narrowed run
# leaves docs/bench/*.png, the full run's figures, alone.
if [ -n "${BENCH_DOC:-}" ]; then
	DOC="$BENCH_DOC"
	PLOTS="$(dirname "$BENCH_DOC")/bench"
	mkdir -p "$PLOTS"
else
	DOC=docs/benchmarks.md
	PLOTS=docs/bench
fi
log "writing $DOC and $PLOTS/*.png"
"$PY" bench/report.py "$RESULTS" "$DOC" "$PLOTS"
log "done"
