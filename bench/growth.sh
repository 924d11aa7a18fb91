#!/usr/bin/env bash
# Growth bench (issue 22, item 5): how a GC pass, catalog paging and tag lists cost as a store
# grows. Never part of `cargo test`; fails only when something could not run.
#
#   bench/growth.sh [--scales "10000 100000"] [--stores "fs s3"]
#
# For each store (fs: a directory; s3: a single-process SeaweedFS) and each scale B (blobs):
#   1. `rd-bench grow` writes B/100 repositories `grow/rNNNN` of 10 manifests (a config and 9
#      layers each, so B blobs), every 10th manifest untagged, and `grow/big` with B/10 tags,
#      through the store API (bench/src/grow.rs), then checks one image through the registry.
#   2. A GC pass, `rdctl registry gc --grace 3s --delete-untagged` (deletes the untagged tenth):
#      wall time, peak RSS (/usr/bin/time), S3 requests by operation (the s3-fixtures counting
#      proxy, `rd-bench s3proxy`).
#   3. `rdctl registry serve` on the store: `rd-bench catalog` pages /v2/_catalog with n=100 to
#      the end, gets grow/big's tag list whole, then pages it with n=100; S3 requests counted.
#   4. `rdctl registry retention --dry-run` with one policy over grow/** keeping each
#      repository's 5 newest tags: wall time, peak RSS, S3 requests.
# Output: one JSON line per measurement in bench/out/growth/results.jsonl and a Markdown table
# on stdout (docs/benchmarks.md: its rows in "Where each cell stands", and "Growth").
# BENCH_PROFILE=debug uses target/debug binaries (built if missing) instead of a release build.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SCALES="10000 100000"
STORES="fs s3"
while [ $# -gt 0 ]; do
	case "$1" in
	--scales) SCALES="$2"; shift 2 ;;
	--stores) STORES="$2"; shift 2 ;;
	-h | --help) sed -n '2,20p' "$0"; exit 0 ;;
	*) echo "bench/growth.sh: unknown argument $1" >&2; exit 2 ;;
	esac
done
cd "$ROOT"
PROFILE="${BENCH_PROFILE:-release}"
if [ "$PROFILE" = release ]; then
	cargo build --release -q -p rdctl -p rd-bench
else
	cargo build -q -p rdctl -p rd-bench
fi
RDCTL="$ROOT/target/$PROFILE/rdctl"
BENCH="$ROOT/target/$PROFILE/rd-bench"
WEED="${WEED:-$ROOT/.tools/bin/weed}"
for t in jq curl /usr/bin/time; do
	command -v "$t" > /dev/null || { echo "bench/growth.sh: $t missing" >&2; exit 1; }
done
OUT="$ROOT/bench/out/growth"
mkdir -p "$OUT"
RESULTS="$OUT/results.jsonl"
: > "$RESULTS"
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_scratch rd-growth
log() { printf '[%s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
record() { jq -c -n --arg store "$1" --argjson blobs "$2" --argjson r "$3" '$r + {store: $store, scale: $blobs}' >> "$RESULTS"; }
echo "{\"section\":\"machine\",\"date\":\"$(date -u +%FT%TZ)\",\"profile\":\"$PROFILE\",\"cores\":$(nproc),\"load_start\":\"$(cut -d' ' -f1-3 /proc/loadavg)\"}" >> "$RESULTS"

# --- SeaweedFS (as bench/run.sh and s3-fixtures/src/seaweed.rs) and the counting proxy -------
S3URL=""
if [[ " $STORES " == *" s3 "* ]]; then
	[ -x "$WEED" ] || { echo "bench/growth.sh: $WEED missing; run scripts/install-deps.sh" >&2; exit 1; }
	weed_start
	WS="${S3URL##*:}"
	coproc PROXY { exec "$BENCH" s3proxy --upstream "127.0.0.1:$WS"; }
	PIDS+=("$PROXY_PID")
	read -r PROXY_URL <&"${PROXY[0]}"
fi
proxy_cmd() { echo "$1" >&"${PROXY[1]}"; local line; read -r line <&"${PROXY[0]}"; echo "$line"; }
counts() { # the proxy's counts since the last reset, or {} without S3
	if [ "$1" = s3 ]; then proxy_cmd counts; else echo '{}'; fi
}
reset_counts() { [ "$1" != s3 ] || proxy_cmd reset > /dev/null; }

for store in $STORES; do
	for blobs in $SCALES; do
		repos=$((blobs / 100))
		tags=$((blobs / 10))
		name="$store-$blobs"
		case "$store" in
		fs)
			where=(--data "$WORK/$name")
			grow_where=(--data "$WORK/$name")
			;;
		s3)
			bucket="growth$blobs"
			for i in $(seq 20); do
				[ "$(curl -s -o /dev/null -w '%{http_code}' -X PUT "$S3URL/$bucket")" = 200 ] && break
				sleep 0.5
			done
			where=(--s3-endpoint "$PROXY_URL" --s3-bucket "$bucket")
			grow_where=(--s3-endpoint "$S3URL" --s3-bucket "$bucket")
			;;
		*) echo "bench/growth.sh: unknown store $store" >&2; exit 2 ;;
		esac
		log "$name: growing $blobs blobs in $((repos * 10)) manifests across $repos repositories, $tags tags in grow/big"
		g=$("$BENCH" grow "${grow_where[@]}" --repos "$repos" --manifests 10 --layers 9 \
			--untagged-every 10 --big-tags "$tags" --conc 32)
		record "$store" "$blobs" "$g"
		log "$name: $(jq -c '{store_writes, secs}' <<< "$g")"

		# The grown store is a registry's store: one image pulls and verifies through it.
		port=$(free_port)
		RDCTL_LOG=warn "$RDCTL" registry serve --listen "127.0.0.1:$port" "${where[@]}" >> "$WORK/$name.log" 2>&1 &
		SPID=$!
		PIDS+=("$SPID")
		wait_http "http://127.0.0.1:$port/v2/"
		m=$(curl -sf -H 'Accept: application/vnd.oci.image.manifest.v1+json' "http://127.0.0.1:$port/v2/grow/r0001/manifests/m3")
		d=$(jq -r '.layers[4].digest' <<< "$m")
		got=$(curl -sf "http://127.0.0.1:$port/v2/grow/r0001/blobs/$d" | sha256sum | cut -d' ' -f1)
		[ "sha256:$got" = "$d" ] || { echo "bench/growth.sh: $name: grown image does not verify" >&2; exit 1; }

		# Catalog and tag list through the registry.
		reset_counts "$store"
		c=$("$BENCH" catalog --url "http://127.0.0.1:$port" --n 100 --tags-of grow/big)
		cc=$(counts "$store")
		record "$store" "$blobs" "$(jq -c --argjson s3 "$cc" '. + {s3: $s3}' <<< "$c")"
		log "$name: $(jq -c '{catalog_pages, catalog_secs, tags, tag_list_secs, tag_pages_secs}' <<< "$c") s3 $cc"
		kill "$SPID"
		wait "$SPID" 2> /dev/null || true

		# A retention dry-run over every grown repository: keep each one's 5 newest tags.
		printf '[[retention]]\nrepositories = ["grow/**"]\nkeep_newest = 5\n' > "$WORK/retention.toml"
		reset_counts "$store"
		/usr/bin/time -v -o "$WORK/$name.rtime" "$RDCTL" registry retention --config "$WORK/retention.toml" \
			"${where[@]}" --dry-run --json > "$WORK/$name.ret.json" 2> "$WORK/$name.ret.log" || {
			echo "bench/growth.sh: $name: retention dry-run failed" >&2
			tail -20 "$WORK/$name.ret.log" >&2
			exit 1
		}
		rc=$(counts "$store")
		rss=$(awk -F': ' '/Maximum resident set size/{print $2}' "$WORK/$name.rtime")
		wall=$(awk -F': ' '/Elapsed \(wall clock\)/{print $2}' "$WORK/$name.rtime")
		r=$(jq -c --argjson s3 "$rc" --argjson rss "$rss" --arg wall "$wall" \
			'{op: "retention", tags_seen, repositories, would_remove_tags: (.tags | length), would_remove_manifests: (.manifests | length), peak_rss_kib: $rss, wall: $wall, s3: $s3}' \
			"$WORK/$name.ret.json")
		record "$store" "$blobs" "$r"
		log "$name: retention dry-run $r"

		# A GC pass; the grown objects must be older than the grace.
		sleep 4
		reset_counts "$store"
		/usr/bin/time -v -o "$WORK/$name.time" "$RDCTL" registry gc "${where[@]}" --grace 3s \
			--delete-untagged --json > "$WORK/$name.gc.json" 2> "$WORK/$name.gc.log" || {
			echo "bench/growth.sh: $name: gc failed" >&2
			tail -20 "$WORK/$name.gc.log" >&2
			exit 1
		}
		gcc=$(counts "$store")
		rss=$(awk -F': ' '/Maximum resident set size/{print $2}' "$WORK/$name.time")
		wall=$(awk -F': ' '/Elapsed \(wall clock\)/{print $2}' "$WORK/$name.time")
		r=$(jq -c --argjson s3 "$gcc" --argjson rss "$rss" --arg wall "$wall" \
			'{op: "gc", elapsed_secs, marked_manifests, marked_blobs, deleted_blobs, deleted_blob_links, deleted_manifest_links, kept_young, peak_rss_kib: $rss, wall: $wall, s3: $s3}' \
			"$WORK/$name.gc.json")
		record "$store" "$blobs" "$r"
		log "$name: gc $r"
		rm -rf "$WORK/$name"
	done
done

# --- table -------------------------------------------------------------------------------------
jq -r -s '
	def s3total: (.s3 // {}) | [.[]] | add // 0;
	def f: . * 100 | round / 100;
	(map(select(.op == "grow")) | map({key: "\(.store)-\(.scale)", value: .}) | from_entries) as $g
	| (map(select(.op == "catalog")) | map({key: "\(.store)-\(.scale)", value: .}) | from_entries) as $c
	| (map(select(.op == "gc")) | map({key: "\(.store)-\(.scale)", value: .}) | from_entries) as $gc
	| "| store | blobs | grow (writes, s) | GC pass (s) | GC peak RSS (MiB) | GC S3 requests | GC deleted blobs | catalog pages n=100 (s) | tag list of grow/big (tags, s) | tags paged n=100 (pages, s) | catalog + tags S3 req. |",
	  "|---|---|---|---|---|---|---|---|---|---|---|",
	  ($gc | keys_unsorted[] as $k
	   | "| \($gc[$k].store) | \($gc[$k].scale) | \($g[$k].store_writes), \($g[$k].secs | f) | \($gc[$k].elapsed_secs | f) | \($gc[$k].peak_rss_kib / 1024 | f) | \($gc[$k] | s3total) | \($gc[$k].deleted_blobs) | \($c[$k].catalog_pages), \($c[$k].catalog_secs | f) | \($c[$k].tags), \($c[$k].tag_list_secs | f) | \($c[$k].tag_pages), \($c[$k].tag_pages_secs | f) | \($c[$k] | s3total) |")
' "$RESULTS"
echo
jq -r -s '
	def s3total: (.s3 // {}) | [.[]] | add // 0;
	"| store | blobs | retention dry-run (wall) | peak RSS (MiB) | tags looked at | would remove (tags, manifests) | S3 requests |",
	"|---|---|---|---|---|---|---|",
	(.[] | select(.op == "retention")
	 | "| \(.store) | \(.scale) | \(.wall) | \(.peak_rss_kib / 1024 * 10 | round / 10) | \(.tags_seen) | \(.would_remove_tags), \(.would_remove_manifests) | \(s3total) |")
' "$RESULTS"
