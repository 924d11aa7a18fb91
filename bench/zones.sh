#!/usr/bin/env bash
# The Nth zone from one image on the wired path (issue 36): `rdctl worker run --once` making
# zones 1, 2, ... N from one image, once with `[layer_store] kind = "zfs"` on a zfs-fuse
# file-backed pool and once with the directory store (every zone root a full copy on the host's
# disk). Never part of `cargo test`; fails only when something could not run.
#
#   bench/zones.sh [--zones 50] [--mib 24] [--report "1 10 50"]
#
# The image: one layer of --mib MiB in 64 KiB files of random bytes (incompressible: the bytes
# a zone costs are the image's), made with umoci 0.6 and pushed with skopeo to `rdctl registry
# serve` on loopback. For each store, zone i is added to the worker's zones directory and one
# `rdctl worker run --once` pass makes it (the zones already made are checked and kept); each
# pass is timed. Around the passes of --report, after 6 s for ZFS to write its transaction
# group: the store's space (`zfs get -p used` of the store's `layers` and `zones` datasets;
# `du -B1` of the directory store's roots) and the bytes written to disk (the worker's own
# writes from `/usr/bin/time -v` "File system outputs", and for ZFS the zfs-fuse daemon's
# `write_bytes` from /proc, which is what reaches the pool's file). zfs-fuse has no `written`
# property, so `used` stands in for it.
#
# ZFS: this script starts `zfs-fuse --no-daemon` itself and stops it by its PID at the end,
# after destroying its pool. zfs-fuse allows one daemon per machine: if one is running (another
# test's), the script waits until it is gone (at most 20 minutes). The test fixture
# (worker-runtime/tests/zfspool) takes the same lock file, so it never starts a second daemon
# beside this one; a test that runs meanwhile uses this daemon with a pool of its own.
# Output: bench/out/zones/results.jsonl and a Markdown table on stdout.
# Needs: zfs-fuse (Debian), /dev/fuse, skopeo, python3, .tools/bin/umoci-0.6, /usr/bin/time.
# RDCTL_BIN=PATH uses that rdctl and builds nothing.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ZONES=50
MIB=24
REPORT="1 10 50"
while [ $# -gt 0 ]; do
	case "$1" in
	--zones) ZONES="$2"; shift 2 ;;
	--mib) MIB="$2"; shift 2 ;;
	--report) REPORT="$2"; shift 2 ;;
	-h | --help) sed -n '2,29p' "$0"; exit 0 ;;
	*) echo "bench/zones.sh: unknown argument $1" >&2; exit 2 ;;
	esac
done
export PATH="$PATH:/usr/sbin:/sbin"
UMOCI="$ROOT/.tools/bin/umoci-0.6"
for t in zfs-fuse zpool zfs skopeo python3 jq "$UMOCI" /usr/bin/time; do
	command -v "$t" > /dev/null || { echo "bench/zones.sh: $t missing; run scripts/install-deps.sh" >&2; exit 1; }
done
[ -e /dev/fuse ] || { echo "bench/zones.sh: /dev/fuse is missing (zfs-fuse needs FUSE)" >&2; exit 1; }
cd "$ROOT"
if [ -n "${RDCTL_BIN:-}" ]; then
	RDCTL="$RDCTL_BIN"
else
	cargo build --release -q -p rdctl
	RDCTL="$ROOT/target/release/rdctl"
fi
OUT="$ROOT/bench/out/zones"
mkdir -p "$OUT"
RESULTS="$OUT/results.jsonl"
: > "$RESULTS"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/rd-zones.XXXXXX")"
ZPID=""
POOL="rdbench$$"
REG_PID=""
log() { printf '[%s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
cleanup() {
	[ -z "$REG_PID" ] || kill "$REG_PID" 2> /dev/null || true
	if [ -n "$ZPID" ]; then
		local i
		for i in $(seq 30); do
			zpool destroy -f "$POOL" 2> /dev/null && break
			zpool list -H -o name 2> /dev/null | grep -qx "$POOL" || break
			sleep 0.5
		done
		kill "$ZPID" 2> /dev/null || true
		wait "$ZPID" 2> /dev/null || true
	fi
	rm -rf "$WORK"
}
trap cleanup EXIT

# --- the image ------------------------------------------------------------------------------
log "making the image: $MIB MiB in 64 KiB files"
python3 - "$MIB" "$WORK/tree" << 'PY'
import os, sys
mib, tree = int(sys.argv[1]), sys.argv[2]
for i in range(mib * 16):
    d = os.path.join(tree, f"opt/bench/d{i // 64:02d}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i:04d}"), "wb") as f:
        f.write(os.urandom(64 << 10))
PY
tar --sort=name --numeric-owner --owner=0 --group=0 -C "$WORK/tree" -cf "$WORK/layer.tar" .
"$UMOCI" init --layout "$WORK/image" > /dev/null
"$UMOCI" new --image "$WORK/image:base" > /dev/null
"$UMOCI" config --image "$WORK/image:base" --tag cfg --os illumos --config.cmd /bin/true > /dev/null
"$UMOCI" raw add-layer --image "$WORK/image:cfg" --tag bench "$WORK/layer.tar" > /dev/null
rm -f "$WORK/layer.tar"
LAYER_BYTES=$(find "$WORK/image/blobs/sha256" -type f -printf '%s\n' | sort -n | tail -1)
TREE_BYTES=$(du -sb "$WORK/tree" | cut -f1)

"$RDCTL" registry serve --listen 127.0.0.1:0 --data "$WORK/registry" 2> "$WORK/registry.log" &
REG_PID=$!
HOST=""
for _ in $(seq 100); do
	HOST=$(sed -n 's/.*registry listening on \([0-9.:]*\).*/\1/p' "$WORK/registry.log" 2> /dev/null | head -1) || true
	[ -n "$HOST" ] && break
	sleep 0.1
done
[ -n "$HOST" ] || { echo "bench/zones.sh: the registry did not start:" >&2; cat "$WORK/registry.log" >&2; exit 1; }
REF="$HOST/bench/zone:1"
skopeo --insecure-policy copy -q --dest-tls-verify=false "oci:$WORK/image:bench" "docker://$REF"

# --- ZFS: one daemon of ours, one file-backed pool --------------------------------------------
answers() { zpool list -H > /dev/null 2>&1; }
exec 9> "${TMPDIR:-/tmp}/rdctl-zfs-fuse.lock"
for i in $(seq 1200); do
	flock 9
	answers || break
	flock -u 9
	[ "$i" = 1 ] && log "a zfs-fuse daemon is running (another test's: $(pgrep -a zfs-fuse | head -1)); waiting for it to stop"
	[ "$i" = 1200 ] && { echo "bench/zones.sh: another zfs-fuse kept running for 20 minutes" >&2; exit 1; }
	sleep 1
done
zfs-fuse --no-daemon --no-kstat-mount > "$WORK/zfs-fuse.log" 2>&1 &
ZPID=$!
for i in $(seq 300); do
	answers && break
	kill -0 "$ZPID" 2> /dev/null || { echo "bench/zones.sh: zfs-fuse exited:" >&2; cat "$WORK/zfs-fuse.log" >&2; exit 1; }
	[ "$i" = 300 ] && { echo "bench/zones.sh: zfs-fuse did not answer" >&2; exit 1; }
	sleep 0.1
done
flock -u 9
truncate -s 2G "$WORK/pool.img"
zpool create -f -m "$WORK/pool" "$POOL" "$WORK/pool.img"
# The parent keeps an inherited mountpoint: with `mountpoint=none` (docs/operations.md's illumos
# recipe) the layer datasets inherit `none` and the worker refuses them ("is not mounted").
zfs create "$POOL/rdctl"

zfs_written() { awk '/^write_bytes/{print $2}' "/proc/$ZPID/io"; }
zfs_used() { # bytes used by the store's layers and zones datasets
	local l z
	l=$(zfs get -H -p -o value used "$POOL/rdctl/layers" 2> /dev/null || echo 0)
	z=$(zfs get -H -p -o name,value -r used "$POOL/rdctl" | awk -v p="$POOL/rdctl/" 'index($1, p) == 1 && $1 !~ /@/ && $1 !~ /layers/ && split(substr($1, length(p) + 1), a, "/") == 1 {s += $2} END {print s + 0}')
	echo "$l $z"
}

# run_side STORE: zones 1..ZONES, one pass each.
run_side() {
	local store=$1 node="$WORK/node-$1" i t oublock rss zw0 zw1 used_l used_z du0 du1 ul0 uz0
	mkdir -p "$node/zones"
	{
		printf 'zones_dir = "zones"\nstate_dir = "state"\nworker_id = "bench"\nplain_http = true\ngc_grace_secs = 0\n'
		# No image GC by disk usage during the bench (the host's disk is shared and may be full).
		printf 'image_gc_high_percent = 100\nimage_gc_low_percent = 99\n'
		printf '[provisioner]\nkind = "dir"\nbase = "roots"\n'
		[ "$store" = dir ] || printf '[layer_store]\nkind = "zfs"\ndataset = "%s"\n' "$POOL/rdctl"
	} > "$node/worker.toml"
	for i in $(seq "$ZONES"); do
		local report=0
		[[ " $REPORT " != *" $i "* ]] || report=1
		printf 'name = "z%03d"\nimage = "%s"\npull_policy = "IfNotPresent"\n' "$i" "$REF" > "$node/zones/z$(printf %03d "$i").toml"
		if [ "$report" = 1 ]; then
			sync
			[ "$store" = dir ] || sleep 6
			zw0=$([ "$store" = dir ] && echo 0 || zfs_written)
			read -r ul0 uz0 < <([ "$store" = dir ] && echo "0 0" || zfs_used)
			du0=$([ -d "$node/roots" ] && du -s -B1 "$node/roots" | cut -f1 || echo 0)
		fi
		RDCTL_LOG=info NO_COLOR=1 /usr/bin/time -v -o "$WORK/time" "$RDCTL" worker run --once --config "$node/worker.toml" \
			> /dev/null 2> "$WORK/pass.log" || { echo "bench/zones.sh: $store zone $i: the pass failed" >&2; tail -20 "$WORK/pass.log" >&2; exit 1; }
		t=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$WORK/time" | awk -F: '{ if (NF == 3) print $1 * 3600 + $2 * 60 + $3; else print $1 * 60 + $2 }')
		[ -f "$node/roots/z$(printf %03d "$i")/root/opt/bench/d00/f0000" ] ||
			{ echo "bench/zones.sh: $store zone $i: no root after the pass" >&2; tail -20 "$WORK/pass.log" >&2; exit 1; }
		jq -c -n --arg store "$store" --argjson zone "$i" --argjson secs "$t" --arg load "$(cut -d' ' -f1 /proc/loadavg)" \
			'{store: $store, zone: $zone, pass_secs: $secs, load: $load}' >> "$WORK/passes.jsonl"
		if [ "$report" = 1 ]; then
			oublock=$(awk -F': ' '/File system outputs/{print $2}' "$WORK/time")
			rss=$(awk -F': ' '/Maximum resident set size/{print $2}' "$WORK/time")
			sync
			[ "$store" = dir ] || sleep 6
			zw1=$([ "$store" = dir ] && echo 0 || zfs_written)
			read -r used_l used_z < <([ "$store" = dir ] && echo "0 0" || zfs_used)
			du1=$(du -s -B1 "$node/roots" | cut -f1)
			jq -c -n --arg store "$store" --argjson zone "$i" --argjson secs "$t" --argjson ob "$oublock" \
				--argjson rss "$rss" --argjson zw "$((zw1 - zw0))" --argjson ul "$used_l" --argjson uz "$used_z" \
				--argjson dul "$((used_l - ul0))" --argjson duz "$((used_z - uz0))" --argjson du "$du1" --argjson ddu "$((du1 - du0))" \
				--argjson state "$(du -s -B1 "$node/state" | cut -f1)" --arg load "$(cut -d' ' -f1-3 /proc/loadavg)" \
				'{store: $store, zone: $zone, pass_secs: $secs, worker_disk_writes: ($ob * 512), peak_rss_kib: $rss,
				  zfs_fuse_writes: $zw, zfs_used_layers: $ul, zfs_used_zones: $uz, zfs_used_layers_delta: $dul,
				  zfs_used_zones_delta: $duz, roots_du: $du, roots_du_delta: $ddu, content_store_du: $state, load: $load}' >> "$RESULTS"
			log "$store zone $i: $(tail -1 "$RESULTS")"
		fi
	done
	jq -s -c --arg store "$store" 'map(select(.store == $store)) | {store: $store, op: "all", zones: length, total_secs: (map(.pass_secs) | add)}' "$WORK/passes.jsonl" >> "$RESULTS"
}

echo "{\"section\":\"machine\",\"date\":\"$(date -u +%FT%TZ)\",\"commit\":\"$(git rev-parse --short HEAD)\",\"cores\":$(nproc),\"layer_bytes\":$LAYER_BYTES,\"tree_bytes\":$TREE_BYTES,\"zfs_fuse\":\"$(dpkg-query -W -f '${Version}' zfs-fuse 2> /dev/null || echo unknown)\",\"load_start\":\"$(cut -d' ' -f1-3 /proc/loadavg)\"}" >> "$RESULTS"
log "zfs store: $ZONES zones"
run_side zfs
log "directory store: $ZONES zones"
run_side dir
cp "$WORK/passes.jsonl" "$OUT/passes.jsonl"

# --- table -------------------------------------------------------------------------------------
jq -r -s '
	def mb: . / 1e6 * 10 | round / 10;
	def f: . * 100 | round / 100;
	(map(select(.op == "all")) | map({key: .store, value: .}) | from_entries) as $all
	| map(select(.zone != null and .op == null)) as $rows
	| ($rows | map(.zone) | unique) as $zones
	| "| zone | ZFS store: pass (s) | ZFS: bytes written to the pool (zfs-fuse) | ZFS: used, layers + zones datasets (MB), this zone | directory store: pass (s) | directory: bytes written (worker) | directory: roots `du` (MB), this zone | load |",
	  "|---|---|---|---|---|---|---|---|",
	  ($zones[] as $z
	   | ($rows | map(select(.zone == $z and .store == "zfs")) | first) as $a
	   | ($rows | map(select(.zone == $z and .store == "dir")) | first) as $b
	   | "| \($z) | \($a.pass_secs | f) | \($a.zfs_fuse_writes | mb) MB (+ \($a.worker_disk_writes | mb) MB by the worker on the host) | \($a.zfs_used_layers | mb) + \($a.zfs_used_zones | mb) (+\($a.zfs_used_layers_delta + $a.zfs_used_zones_delta | mb)) | \($b.pass_secs | f) | \($b.worker_disk_writes | mb) MB | \($b.roots_du | mb) (+\($b.roots_du_delta | mb)) | \($a.load | split(" ")[0]), \($b.load | split(" ")[0]) |"),
	  "| all \($all.zfs.zones) | \($all.zfs.total_secs | f) | | | \($all.dir.total_secs | f) | | | |"
' "$RESULTS"
