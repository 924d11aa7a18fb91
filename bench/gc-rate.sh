#!/usr/bin/env bash
# GC rate on SeaweedFS while pushes continue (issue 38): blobs reclaimed per minute by our
# online collector with a push load running, against CNCF distribution v3's offline
# `registry garbage-collect`. Never part of `cargo test`; fails only when something could not
# run, or when an image our registry acknowledged during the GC lost a blob.
#
#   bench/gc-rate.sh [--scales "10000"] [--dist-scales "10000"] [--untagged-every 4]
#                    [--load-conc 4] [--before 30] [--after 10] [--no-dist-online]
#
# One single-process SeaweedFS (`weed server -s3`, as bench/lib.sh). For each scale B (blobs):
#   ours  1. `rd-bench grow` writes B/100 repositories of 10 images (a config and 9 layers of
#            about 30 bytes: B blobs with the manifests' own, 10% more), every Nth image of a
#            repository untagged (--untagged-every: 4 leaves 2 of 10 untagged, 20% of the
#            blobs unreferenced once untagged manifests go), through the store API.
#         2. `rdctl registry serve` on the bucket; `rd-bench push-images` pushes small images
#            (a config, 2 layers, a tag) with --load-conc clients until told to stop, recording
#            every acknowledged push. After --before seconds, `rdctl registry gc --grace 3s
#            --delete-untagged` runs against the same bucket (through the counting S3 proxy)
#            while the pushes go on; --after seconds later the load stops.
#         3. `rd-bench verify-images` pulls every image the load pushed (manifest by tag, every
#            blob checked against its digest): a broken one fails the bench.
#   dist  1. The same shape pushed through distribution v3's HTTP API on its own bucket (its
#            store layout is not ours, so `grow` cannot seed it): the seeding rate is reported.
#         2. The registry stopped (distribution's GC needs writes stopped: it marks, then
#            deletes every blob it did not mark, including ones a push uploaded meanwhile),
#            `distribution-v3 garbage-collect CONFIG --delete-untagged` timed, S3 requests
#            counted; the registry started again and every tagged seeded image pulled.
#         3. Unless --no-dist-online: what stopping writes prevents. The push load runs against
#            v3 while a second `garbage-collect` (nothing old is garbage any more) runs, then
#            every image the load pushed is pulled; the broken ones are counted, not fatal.
# --dist-scales "" skips distribution (say so in the docs; at 100,000 its HTTP seeding can
# take longer than the bench is worth: the 10,000 run's seeding rate tells how long).
# Output: one JSON line per measurement in bench/out/gc-rate/results.jsonl and a Markdown
# table on stdout (docs/benchmarks.md: its row in "Where each cell stands", and "GC at the
# rate users see on object stores").
# BENCH_PROFILE=debug uses target/debug binaries (built if missing) instead of a release build;
# RDCTL_BIN=PATH and BENCH_BIN=PATH together use those binaries and build nothing.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SCALES="10000"
DIST_SCALES="10000"
UNTAGGED=4
LOAD_CONC=4
BEFORE=30
AFTER=10
DIST_ONLINE=1
while [ $# -gt 0 ]; do
	case "$1" in
	--scales) SCALES="$2"; shift 2 ;;
	--dist-scales) DIST_SCALES="$2"; shift 2 ;;
	--untagged-every) UNTAGGED="$2"; shift 2 ;;
	--load-conc) LOAD_CONC="$2"; shift 2 ;;
	--before) BEFORE="$2"; shift 2 ;;
	--after) AFTER="$2"; shift 2 ;;
	--no-dist-online) DIST_ONLINE=0; shift ;;
	-h | --help) sed -n '2,37p' "$0"; exit 0 ;;
	*) echo "bench/gc-rate.sh: unknown argument $1" >&2; exit 2 ;;
	esac
done
cd "$ROOT"
PROFILE="${BENCH_PROFILE:-release}"
if [ -n "${RDCTL_BIN:-}" ] && [ -n "${BENCH_BIN:-}" ]; then
	RDCTL="$RDCTL_BIN" BENCH="$BENCH_BIN"
else
	if [ "$PROFILE" = release ]; then
		cargo build --release -q -p rdctl -p rd-bench
	else
		cargo build -q -p rdctl -p rd-bench
	fi
	RDCTL="$ROOT/target/$PROFILE/rdctl"
	BENCH="$ROOT/target/$PROFILE/rd-bench"
fi
WEED="${WEED:-$ROOT/.tools/bin/weed}"
for t in jq curl python3 /usr/bin/time "$WEED"; do
	command -v "$t" > /dev/null || { echo "bench/gc-rate.sh: $t missing; run scripts/install-deps.sh" >&2; exit 1; }
done
OUT="$ROOT/bench/out/gc-rate"
mkdir -p "$OUT"
RESULTS="$OUT/results.jsonl"
: > "$RESULTS"
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
BENCH_PEERS=dist
[ -z "$DIST_SCALES" ] || check_peers
bench_scratch rd-gc-rate
log() { printf '[%s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
now() { date +%s.%N; }
record() { # side blobs json
	jq -c -n --arg side "$1" --argjson blobs "$2" --argjson r "$3" --arg load "$(loadavg)" \
		'$r + {side: $side, scale: $blobs, load: $load}' >> "$RESULTS"
}
echo "{\"section\":\"machine\",\"date\":\"$(date -u +%FT%TZ)\",\"profile\":\"$PROFILE\",\"cores\":$(nproc),\"commit\":\"$(git rev-parse --short HEAD)\",\"dist\":\"$(dist_version dist)\",\"load_start\":\"$(loadavg)\"}" >> "$RESULTS"

weed_start
WS="${S3URL##*:}"
coproc PROXY { exec "$BENCH" s3proxy --upstream "127.0.0.1:$WS"; }
PIDS+=("$PROXY_PID")
read -r PROXY_URL <&"${PROXY[0]}"
proxy_cmd() { echo "$1" >&"${PROXY[1]}"; local line; read -r line <&"${PROXY[0]}"; echo "$line"; }

# rates RECORD T_START T_GC0 T_GC1: pushes/s before the GC (from the load's first request to
# the GC's start) and during it, and the images acknowledged during it.
rates() {
	jq -s -c --argjson g0 "$2" --argjson g1 "$3" '
		(map(.t0) | min) as $s
		| {pushes_per_sec_before: ((map(select(.t1 < $g0)) | length) / ($g0 - $s)),
		   pushes_per_sec_during: ((map(select(.t1 >= $g0 and .t1 <= $g1)) | length) / ($g1 - $g0)),
		   pushed_during_gc: (map(select(.t1 >= $g0 and .t1 <= $g1)) | length),
		   pushed_in_all: length}' "$1"
}

# load_start URL NAME: the push load (sets LOAD_PID); load_stop waits for its summary.
load_start() {
	rm -f "$WORK/stop"
	"$BENCH" push-images --url "$1" --prefix "load-$2" --manifests 100 --layers 2 --untagged-every 0 \
		--seed "$2" --conc "$LOAD_CONC" --stop-file "$WORK/stop" --record "$WORK/$2.load.jsonl" \
		> "$WORK/$2.load.json" 2> "$WORK/$2.load.log" &
	LOAD_PID=$!
	PIDS+=("$LOAD_PID")
}
load_stop() {
	touch "$WORK/stop"
	wait "$LOAD_PID" || { echo "bench/gc-rate.sh: the push load failed" >&2; tail -20 "$WORK/$1.load.log" >&2; exit 1; }
}

for blobs in $SCALES; do
	repos=$((blobs / 100))
	name="ours-$blobs"
	bucket="gcours$blobs"
	bucket_new "$bucket"
	log "$name: growing $blobs blobs in $((repos * 10)) images, every ${UNTAGGED}th of a repository untagged"
	g=$("$BENCH" grow --s3-endpoint "$S3URL" --s3-bucket "$bucket" --repos "$repos" --manifests 10 --layers 9 \
		--untagged-every "$UNTAGGED" --big-tags 0 --conc 32)
	record ours "$blobs" "$g"
	log "$name: $(jq -c '{store_writes, secs}' <<< "$g")"
	port=$(free_port)
	start_ours "$name" "$port" --s3-endpoint "$S3URL" --s3-bucket "$bucket"
	SPID=$STARTED_PID
	url="http://127.0.0.1:$port"
	sleep 4 # the grown objects are older than the grace
	load_start "$url" "$name"
	sleep "$BEFORE"
	proxy_cmd reset > /dev/null
	g0=$(now)
	l0=$(loadavg)
	log "$name: gc with the push load running (load average $l0)"
	/usr/bin/time -v -o "$WORK/$name.time" "$RDCTL" registry gc --s3-endpoint "$PROXY_URL" --s3-bucket "$bucket" \
		--grace 3s --delete-untagged --json > "$WORK/$name.gc.json" 2> "$WORK/$name.gc.log" || {
		echo "bench/gc-rate.sh: $name: gc failed" >&2
		tail -20 "$WORK/$name.gc.log" >&2
		exit 1
	}
	g1=$(now)
	l1=$(loadavg)
	s3=$(proxy_cmd counts)
	sleep "$AFTER"
	load_stop "$name"
	rss=$(awk -F': ' '/Maximum resident set size/{print $2}' "$WORK/$name.time")
	r=$(jq -c --argjson s3 "$s3" --argjson rss "$rss" --argjson g0 "$g0" --argjson g1 "$g1" \
		--arg l0 "$l0" --arg l1 "$l1" --argjson rates "$(rates "$WORK/$name.load.jsonl" "$g0" "$g1")" \
		--argjson load "$(cat "$WORK/$name.load.json")" \
		'{op: "gc", online: true, wall_secs: ($g1 - $g0), elapsed_secs, marked_blobs, deleted_blobs,
		  deleted_manifest_links, kept_young, kept_held,
		  blobs_per_min: (.deleted_blobs / ($g1 - $g0) * 60), peak_rss_kib: $rss, s3: $s3,
		  load_gc_start: $l0, load_gc_end: $l1, push_retries: $load.retries,
		  push_failed: $load.failed} + $rates' "$WORK/$name.gc.json")
	log "$name: verifying every image the load pushed"
	v=$("$BENCH" verify-images --url "$url" --record "$WORK/$name.load.jsonl")
	r=$(jq -c --argjson v "$v" '. + {verified_images: $v.images, verified_blobs: $v.blobs_pulled, broken_images: $v.broken_images, first_broken: $v.first_broken}' <<< "$r")
	record ours "$blobs" "$r"
	log "$name: $r"
	[ "$(jq .broken_images <<< "$v")" = 0 ] || { echo "bench/gc-rate.sh: $name: an acknowledged image lost a blob: $v" >&2; exit 1; }
	stop_pid "$SPID"
	bucket_drop "$bucket"
done

for blobs in $DIST_SCALES; do
	repos=$((blobs / 100))
	name="dist-$blobs"
	bucket="gcdist$blobs"
	bucket_new "$bucket"
	port=$(free_port)
	url="http://127.0.0.1:$port"
	# Through the counting proxy, so the GC's requests are counted; its config is $WORK/dist-s3.yml.
	s3_server dist "$PROXY_URL" "$bucket" "$port"
	DPID=$STARTED_PID
	log "$name: seeding $blobs blobs through distribution v3's API"
	s=$("$BENCH" push-images --url "$url" --prefix grow --repos "$repos" --manifests 10 --layers 9 \
		--untagged-every "$UNTAGGED" --seed "$name" --conc 16 --record "$WORK/$name.seed.jsonl")
	record dist "$blobs" "$(jq -c '. + {op: "seed"}' <<< "$s")"
	log "$name: seeded $(jq -c '{images, blobs, secs, blobs_per_sec}' <<< "$s")"
	stop_pid "$DPID"
	sleep 1
	proxy_cmd reset > /dev/null
	g0=$(now)
	l0=$(loadavg)
	log "$name: garbage-collect with the registry stopped (load average $l0)"
	env -u AWS_CA_BUNDLE /usr/bin/time -v -o "$WORK/$name.time" "$DIST3_BIN" garbage-collect "$WORK/dist-s3.yml" \
		--delete-untagged > "$WORK/$name.gc.out" 2> "$WORK/$name.gc.log" || {
		echo "bench/gc-rate.sh: $name: garbage-collect failed" >&2
		tail -20 "$WORK/$name.gc.log" "$WORK/$name.gc.out" >&2
		exit 1
	}
	g1=$(now)
	l1=$(loadavg)
	s3=$(proxy_cmd counts)
	rss=$(awk -F': ' '/Maximum resident set size/{print $2}' "$WORK/$name.time")
	# Its summary line: "N blobs marked, M blobs and K manifests eligible for deletion".
	summary=$(grep -ho '[0-9]* blobs marked, [0-9]* blobs and [0-9]* manifests eligible for deletion' "$WORK/$name.gc.out" "$WORK/$name.gc.log" | tail -1)
	[ -n "$summary" ] || { echo "bench/gc-rate.sh: $name: no summary in garbage-collect's output" >&2; tail -5 "$WORK/$name.gc.out" "$WORK/$name.gc.log" >&2; exit 1; }
	read -r marked _ _ deleted _ _ manifests _ <<< "$summary"
	r=$(jq -n -c --argjson s3 "$s3" --argjson rss "$rss" --argjson g0 "$g0" --argjson g1 "$g1" \
		--arg l0 "$l0" --arg l1 "$l1" --argjson marked "$marked" --argjson deleted "$deleted" \
		--argjson manifests "$manifests" \
		'{op: "gc", online: false, wall_secs: ($g1 - $g0), marked_blobs: $marked, deleted_blobs: $deleted,
		  deleted_manifests: $manifests, blobs_per_min: ($deleted / ($g1 - $g0) * 60), peak_rss_kib: $rss,
		  s3: $s3, load_gc_start: $l0, load_gc_end: $l1}')
	s3_server dist "$PROXY_URL" "$bucket" "$port"
	DPID=$STARTED_PID
	v=$("$BENCH" verify-images --url "$url" --record "$WORK/$name.seed.jsonl" --tagged-only)
	r=$(jq -c --argjson v "$v" '. + {verified_tagged_images: $v.images, broken_tagged_images: $v.broken_images, first_broken: $v.first_broken}' <<< "$r")
	record dist "$blobs" "$r"
	log "$name: $r"
	if [ "$DIST_ONLINE" = 1 ]; then
		load_start "$url" "$name"
		sleep "$BEFORE"
		g0=$(now)
		log "$name: garbage-collect again, now with the push load running (not supported by distribution)"
		env -u AWS_CA_BUNDLE "$DIST3_BIN" garbage-collect "$WORK/dist-s3.yml" > "$WORK/$name.gc2.out" 2> "$WORK/$name.gc2.log" || {
			echo "bench/gc-rate.sh: $name: the second garbage-collect failed" >&2
			tail -20 "$WORK/$name.gc2.log" >&2
			exit 1
		}
		g1=$(now)
		sleep "$AFTER"
		load_stop "$name"
		summary=$(grep -ho '[0-9]* blobs marked, [0-9]* blobs and [0-9]* manifests eligible for deletion' "$WORK/$name.gc2.out" "$WORK/$name.gc2.log" | tail -1)
		read -r _ _ _ deleted _ _ _ _ <<< "$summary"
		v=$("$BENCH" verify-images --url "$url" --record "$WORK/$name.load.jsonl")
		r=$(jq -c -n --argjson g0 "$g0" --argjson g1 "$g1" --argjson deleted "${deleted:-0}" --argjson v "$v" \
			--argjson rates "$(rates "$WORK/$name.load.jsonl" "$g0" "$g1")" --argjson load "$(cat "$WORK/$name.load.json")" \
			'{op: "gc-under-load", online: true, wall_secs: ($g1 - $g0), deleted_blobs: $deleted,
			  push_retries: $load.retries, push_failed: $load.failed,
			  verified_images: $v.images, broken_images: $v.broken_images, first_broken: $v.first_broken} + $rates')
		record dist "$blobs" "$r"
		log "$name: $r"
	fi
	stop_pid "$DPID"
	bucket_drop "$bucket"
done

# --- table -------------------------------------------------------------------------------------
jq -r -s '
	def f: . * 10 | round / 10;
	def s3total: (.s3 // {}) | [.[]] | add // 0;
	(map(select(.op == "grow" or .op == "seed")) | map({key: "\(.side)-\(.scale)", value: .}) | from_entries) as $seed
	| (map(select(.op == "gc-under-load")) | map({key: "\(.side)-\(.scale)", value: .}) | from_entries) as $ul
	| "| side | blobs | seeded (how, s) | GC | writes during GC | GC wall (s) | blobs deleted | blobs/min | S3 requests | peak RSS (MiB) | pushes/s before, during GC | images pushed during GC (all load) | acknowledged images broken | load average (start, end) |",
	  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
	  (.[] | select(.op == "gc") | . as $g | "\(.side)-\(.scale)" as $k
	   | if .side == "ours" then
	       "| ours | \(.scale) | store API, \($seed[$k].secs | f) | `rdctl registry gc --delete-untagged`, online | pushes go on | \(.wall_secs | f) | \(.deleted_blobs) | \(.blobs_per_min | round) | \(s3total) | \(.peak_rss_kib / 1024 | f) | \(.pushes_per_sec_before | f), \(.pushes_per_sec_during | f) | \(.pushed_during_gc) (\(.pushed_in_all)) | \(.broken_images) of \(.verified_images) | \(.load_gc_start | split(" ")[0]), \(.load_gc_end | split(" ")[0]) |"
	     else
	       "| distribution v3 | \(.scale) | HTTP pushes, \($seed[$k].secs | f) (\($seed[$k].blobs_per_sec | round) blobs/s) | `garbage-collect --delete-untagged`, offline | registry stopped | \(.wall_secs | f) | \(.deleted_blobs) | \(.blobs_per_min | round) | \(s3total) | \(.peak_rss_kib / 1024 | f) | 0 (stopped) | – | \(.broken_tagged_images) of \(.verified_tagged_images) tagged seeded | \(.load_gc_start | split(" ")[0]), \(.load_gc_end | split(" ")[0]) |"
	       + (if $ul[$k] then "\n| distribution v3, writes not stopped | \(.scale) | (the same store after its GC) | `garbage-collect`, online (unsupported) | pushes go on | \($ul[$k].wall_secs | f) | \($ul[$k].deleted_blobs) | – | – | – | \($ul[$k].pushes_per_sec_before | f), \($ul[$k].pushes_per_sec_during | f) | \($ul[$k].pushed_during_gc) (\($ul[$k].pushed_in_all)) | \($ul[$k].broken_images) of \($ul[$k].verified_images) | – |" else "" end)
	     end)
' "$RESULTS"
