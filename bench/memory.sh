#!/usr/bin/env bash
# Benchmark: peak memory (issue 21, item 7). Benchmarks never fail on a number; this script
# fails only when something could not run.
#   registry  peak RSS of the server while UPLOADS clients each push one distinct 256 MiB blob
#             at once, as skopeo, podman, crane and docker push (POST, one PATCH streamed with
#             `Transfer-Encoding: chunked` and no Content-Length, PUT ?digest=; `rd-bench push
#             --mode stream`, whose blobs are slices of one shared 64 MiB random pool, so the
#             client holds none of them), and the throughput; `rdctl registry serve` against
#             CNCF distribution v3 and 2.8 (bench/lib.sh's sides) on the filesystem (each on an
#             empty directory) and on one
#             SeaweedFS (`weed server -s3`, a fresh bucket per run, distribution's s3 driver),
#             A/B interleaved. Peak RSS is the server's VmHWM (/proc/PID/status) after the push.
#             Each store is deleted before the next side starts: one side holds UPLOADS x 256 MiB.
#   builder   peak RSS of `rdctl build` (gzip level 6) of bench/builder.sh's tree at several
#             sizes (/usr/bin/time -v): memory should not grow with the layer.
#   worker    bench/worker.sh at several sizes: peak RSS of `rdctl worker run --once` and of
#             skopeo copy + umoci raw unpack (largest process), with their times.
#   bench/memory.sh [--runs N] [--no-docs] [--quick]   (RDCTL_BIN, BENCH_BIN: those binaries)
#     --runs N   runs per cell (default 3)
#     --no-docs  print the tables only (bench/out/memory.md), do not append to docs
#     --quick    a smoke run: 8 uploads of 32 MiB, trees of 20 and 40 MiB, 1 run
#   MEM_PARTS (a subset of "registry builder worker"), MEM_STORES ("fs s3"), MEM_UPLOADS (64),
#   MEM_BLOB_MIB (256), MEM_SIDES ("ours dist dist28": the registry part's sides; dist is
#   distribution v3, dist28 is 2.8), MEM_BUILDER_SIZES
#   (tree MiB, or MiB:files to set the file count;
#   "50 200 800 800:5000": 800 MiB in as many files as the 200 MiB tree), MEM_WORKER_SIZES
#   ("50 200 400"; worker.sh keeps every run's trees until its last run, 3 runs of 800 MiB
#   took 8 GiB) narrow a run.
# Needs: release builds of rdctl and rd-bench, docker-registry, .tools/bin/distribution-v3, .tools/bin/weed, jq, curl,
# python3, /usr/bin/time, and what bench/builder.sh and bench/worker.sh need.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUNS=3
DOCS=1
QUICK=0
while [ $# -gt 0 ]; do
	case "$1" in
	--runs) RUNS="$2"; shift ;;
	--no-docs) DOCS=0 ;;
	--quick) QUICK=1; RUNS=1 ;;
	-h | --help) sed -n '2,28p' "$0"; exit 0 ;;
	*) echo "bench/memory.sh: unknown option $1" >&2; exit 2 ;;
	esac
	shift
done
ARGS="--runs $RUNS"
[ "$QUICK" = 0 ] || ARGS="--quick $ARGS"
cd "$ROOT"
MiB=$((1 << 20))
PARTS=" ${MEM_PARTS:-registry builder worker} "
STORES="${MEM_STORES:-fs s3}"
if [ "$QUICK" = 1 ]; then
	UPLOADS=${MEM_UPLOADS:-8} BLOB_MIB=${MEM_BLOB_MIB:-32}
	BUILDER_SIZES="${MEM_BUILDER_SIZES:-20 40 40:500}" WORKER_SIZES="${MEM_WORKER_SIZES:-20 40}"
else
	UPLOADS=${MEM_UPLOADS:-64} BLOB_MIB=${MEM_BLOB_MIB:-256}
	BUILDER_SIZES="${MEM_BUILDER_SIZES:-50 200 800 800:5000}" WORKER_SIZES="${MEM_WORKER_SIZES:-50 200 400}"
fi
RDCTL="${RDCTL_BIN:-$ROOT/target/release/rdctl}"
BENCH="${BENCH_BIN:-$ROOT/target/release/rd-bench}"
WEED="${WEED:-$ROOT/.tools/bin/weed}"
for t in "$RDCTL" "$BENCH" "$WEED" docker-registry jq curl python3 /usr/bin/time; do
	command -v "$t" > /dev/null || { echo "bench/memory.sh needs $t (cargo build --release -p rdctl -p rd-bench; scripts/install-deps.sh)" >&2; exit 2; }
done
log() { printf '[%s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
OUT="$ROOT/bench/out"
mkdir -p "$OUT"
MD="$OUT/memory.md"
: > "$MD"
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
check_peers
bench_scratch rd-memory

stats() { # numbers -> "min median max" ("0 0 0" for none)
	[ $# -gt 0 ] || { echo "0 0 0"; return; }
	printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2; printf "%.0f %.0f %.0f", a[1], m, a[NR] }'
}
mib() { echo $(($1 / 1024)); } # KiB -> MiB
START_LOAD="$(cut -d' ' -f1-3 /proc/loadavg)"
COMMIT="$(git -C "$ROOT" rev-parse --short HEAD)$(git -C "$ROOT" diff --quiet HEAD -- registry bench || echo '+changes')"

# --- registry ---------------------------------------------------------------------------------
if [[ "$PARTS" == *" registry "* ]]; then
	# The store of one side must fit with room to spare (SeaweedFS keeps deleted bytes in its
	# volumes until the bucket's collection is dropped, and distribution's s3 driver copies
	# each blob on commit).
	need=$((UPLOADS * BLOB_MIB * 2 * 1024))
	free=$(df -k --output=avail "${TMPDIR:-/tmp}" | tail -1)
	if [ "$free" -lt "$need" ] && [ "$UPLOADS" -gt 32 ]; then
		log "only $((free / 1024)) MiB free for $((need / 1024)) MiB: 32 uploads instead of $UPLOADS"
		UPLOADS=32
	fi
	TOTAL=$((UPLOADS * BLOB_MIB * MiB))
	declare -A RSS TPUT IDLE FAILED FAILRSS
	seed=$RANDOM
	for store in $STORES; do
		[ "$store" != s3 ] || [ -n "${S3URL:-}" ] || { log "starting SeaweedFS"; weed_start; }
		for run in $(seq "$RUNS"); do
			for srv in $(order "$run"); do
				[[ " ${MEM_SIDES:-ours dist dist28} " == *" $srv "* ]] || continue
				seed=$((seed + 1))
				port=$(free_port)
				if [ "$store" = fs ]; then
					dir="$WORK/data-$srv"
					rm -rf "$dir" && mkdir -p "$dir"
					fs_server "$srv" "$dir" "$port"
				else
					b="m$seed$srv"
					bucket_new "$b"
					s3_server "$srv" "$S3URL" "$b" "$port"
				fi
				pid=$STARTED_PID
				idle=$(hwm "$pid")
				# A failed push (a server error under this load) is counted and reported, not
				# averaged in; the script goes on with the next run.
				if r=$("$BENCH" push --url "http://127.0.0.1:$port" --repo bench/memory --size $((BLOB_MIB * MiB)) \
					--total "$TOTAL" --conc "$UPLOADS" --mode stream --seed "$seed" --digests "$WORK/digests" 2> "$WORK/push.err"); then
					peak=$(hwm "$pid")
					RSS[$store-$srv]+="$peak " TPUT[$store-$srv]+="$(jq .mib_s <<< "$r") " IDLE[$store-$srv]+="$idle "
					log "registry $store $srv run $run: peak RSS $(mib "$peak") MiB (idle $(mib "$idle") MiB), $(jq -r '.mib_s | floor' <<< "$r") MiB/s"
				else
					peak=$(hwm "$pid")
					FAILED[$store-$srv]=$((${FAILED[$store-$srv]:-0} + 1))
					FAILRSS[$store-$srv]+="$(mib "$peak") "
					log "registry $store $srv run $run: the push failed (peak RSS $(mib "$peak") MiB): $(head -c 400 "$WORK/push.err")"
				fi
				stop_pid "$pid"
				if [ "$store" = fs ]; then rm -rf "$dir"; else bucket_drop "$b"; fi
			done
		done
	done
	[ -z "${WEED_PID:-}" ] || stop_pid "$WEED_PID"
	{
		echo "### Registry: $UPLOADS concurrent streamed uploads of $BLOB_MIB MiB ($COMMIT)"
		echo
		echo "Machine: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(nproc) cores; load average $START_LOAD at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end; SeaweedFS $("$WEED" version 2>&1 | head -1 | awk '{print $3}'); $RUNS runs per cell, interleaved; $(date -u +%Y-%m-%d)."
		echo
		echo "| store | server | peak RSS MiB (min / median / max) | ours / this server (median peak RSS) | MiB/s (min / median / max) | throughput ours / this server | idle RSS MiB |"
		echo "|---|---|---|---|---|---|---|"
		ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b > 0) printf "%.2f×", a / b; else printf "–" }'; }
		for store in $STORES; do
			name=$([ "$store" = fs ] && echo "filesystem" || echo "SeaweedFS S3")
			# shellcheck disable=SC2086
			read -r _ omed _ <<< "$(stats ${RSS[$store-ours]:-})"
			# shellcheck disable=SC2086
			read -r _ otmed _ <<< "$(stats ${TPUT[$store-ours]:-})"
			for srv in $SERVERS; do
				[[ " ${MEM_SIDES:-ours dist dist28} " == *" $srv "* ]] || continue
				# shellcheck disable=SC2086
				read -r min med max <<< "$(stats ${RSS[$store-$srv]:-})"
				# shellcheck disable=SC2086
				read -r tmin tmed tmax <<< "$(stats ${TPUT[$store-$srv]:-})"
				# shellcheck disable=SC2086
				read -r _ idle _ <<< "$(stats ${IDLE[$store-$srv]:-})"
				label=$(case "$srv" in ours) echo ours ;; dist) dist_version dist ;; *) dist_version "$srv" ;; esac)
				[ -z "${FAILED[$store-$srv]:-}" ] || label+=" (${FAILED[$store-$srv]} of $RUNS pushes failed, left out; peak RSS when they failed: ${FAILRSS[$store-$srv]% } MiB)"
				if [ "$srv" = ours ]; then r1="–" r2="–"; else r1=$(ratio "$omed" "$med") r2=$(ratio "$otmed" "$tmed"); fi
				echo "| $name | $label | $(mib "$min") / $(mib "$med") / $(mib "$max") | $r1 | $tmin / $tmed / $tmax | $r2 | $(mib "$idle") |"
			done
		done
		echo
		echo "Reproduce: \`MEM_PARTS=registry bench/memory.sh $ARGS\`$([ "$UPLOADS" = 64 ] || echo " (MEM_UPLOADS=$UPLOADS)")$([ "$BLOB_MIB" = 256 ] || echo " (MEM_BLOB_MIB=$BLOB_MIB)")"
		echo
	} >> "$MD"
fi

# --- builder ----------------------------------------------------------------------------------
if [[ "$PARTS" == *" builder "* ]]; then
	ROWS=()
	for spec in $BUILDER_SIZES; do
		size=${spec%%:*}
		files=()
		[ "$spec" = "$size" ] || files=(--files "${spec#*:}")
		log "builder: preparing a $size MiB tree ${files[*]}"
		dir=$(RDCTL_BIN="$RDCTL" bench/builder.sh --size "$size" "${files[@]}" --prepare)
		rss=() secs=()
		for run in $(seq "$RUNS"); do
			rm -rf "$dir/gzip/out"
			/usr/bin/time -v -o "$WORK/time.log" "$RDCTL" build "$dir/gzip/image.toml" --output "$dir/gzip/out" > /dev/null
			rss+=("$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$WORK/time.log")")
			secs+=("$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$WORK/time.log" | awk -F: '{ print $(NF - 1) * 60 + $NF }')")
			log "builder $size MiB run $run: peak RSS $(mib "${rss[-1]}") MiB, ${secs[-1]} s"
		done
		layer=$(find "$dir/gzip/out/blobs/sha256" -type f -printf '%s\n' | sort -n | tail -1)
		tree=$(du -sb "$dir/tree" | cut -f1)
		read -r rmin rmed rmax <<< "$(stats "${rss[@]}")"
		t=$(printf '%s\n' "${secs[@]}" | sort -g | awk '{ a[NR] = $1 } END { printf "%.2f / %.2f / %.2f", a[1], a[int((NR + 1) / 2)], a[NR] }')
		ROWS+=("| $((tree / MiB)) MiB, $(find "$dir/tree" -type f | wc -l) files | $((layer / MiB)) MiB | $(mib "$rmin") / $(mib "$rmed") / $(mib "$rmax") | $t |")
		rm -rf "$dir/gzip/out"
	done
	{
		echo "### Builder: \`rdctl build\` (gzip -6) against layer size ($COMMIT)"
		echo
		echo "Load average $(cut -d' ' -f1-3 /proc/loadavg) at the end; $RUNS runs per size; trees from \`bench/builder.sh --size MIB [--files N] --prepare\` (25 files per MiB unless N is given)."
		echo
		echo "| tree | layer | rdctl build peak RSS MiB (min / median / max) | s (min / median / max) |"
		echo "|---|---|---|---|"
		printf '%s\n' "${ROWS[@]}"
		echo
		echo "Reproduce: \`MEM_PARTS=builder bench/memory.sh $ARGS\`"
		echo
	} >> "$MD"
fi

# --- worker -----------------------------------------------------------------------------------
if [[ "$PARTS" == *" worker "* ]]; then
	{
		echo "### Worker against layer size ($COMMIT)"
		echo
		echo "\`bench/worker.sh --size MIB --runs $RUNS\` per size (its table per size, peak RSS of each side's largest process):"
	} >> "$MD"
	for size in $WORKER_SIZES; do
		log "worker: $size MiB"
		RDCTL_BIN="$RDCTL" bench/worker.sh --size "$size" --runs "$RUNS" --no-docs > /dev/null
		sed 's/^### /#### /' "$OUT/worker.md" >> "$MD"
		# The trees of a large size are several GiB; the next size starts clean.
		rm -rf "$OUT/worker-$size"
	done
	echo >> "$MD"
fi

cat "$MD"
if [ "$DOCS" = 1 ]; then
	if ! grep -q '^## Memory (issue 21, item 7)' docs/benchmarks.md; then
		printf '\n## Memory (issue 21, item 7)\n\nPeak RSS of the registry under many concurrent uploads, and of the builder and the worker\nagainst layer size (`bench/memory.sh`).\n' >> docs/benchmarks.md
	fi
	{ echo; cat "$MD"; } >> docs/benchmarks.md
fi
