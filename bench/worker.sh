#!/usr/bin/env bash
# Benchmark: `rdctl worker run --once` (resolve, pull, verify every blob digest, unpack with
# the DiffID check, provision a `dir` zone) against `skopeo copy docker://… oci:…` followed by
# `umoci raw unpack` of the same image from the same registry (`rdctl registry serve` on
# loopback). The image is one gzip layer of a generated tree (about 300 MiB in 4,000 files:
# text that compresses about 3:1 and some incompressible binaries), made with umoci 0.6 and
# pushed with skopeo; making and pushing it are not timed. Both sides start from empty
# destinations every run and apply owners the same way (as root: owners applied; otherwise
# umoci --rootless).
# A third side is the download alone: every blob of the image (config and layers) fetched at
# once with one `curl` each to /dev/null from the same registry, in the same run (issue 21's
# floor: the worker at ≤ 1.3× of it).
# Then the worker and the download again, through a rate-limiting proxy on loopback for each
# rate of --rates (Mbit/s; one limit shared by every connection of a side, the response
# direction only), interleaved as above: where the link is the bottleneck, a worker that
# unpacks while it downloads takes about the download's time.
# Runs A/B interleaved, prints min/median/max seconds, the ratio of medians (goal: the worker
# at ≤ 0.5× the peer's time) and each side's peak RSS (/usr/bin/time -v), and appends the table
# to docs/benchmarks.md.
#   bench/worker.sh [--quick] [--size MIB] [--runs N] [--no-docs] [--policy]
#                                                          (RDCTL_BIN=PATH: that rdctl)
#     --quick    about 30 MiB in 500 files, 3 runs (a smoke run: seconds, not minutes)
#     --size MIB a tree of about MIB MiB, 13 files per MiB (the default tree's density)
#     --policy   also sign the image and give the worker an admission policy (a `signed` rule,
#                one key, two required attestations); reports the time of each admission
#                check (fetch the signatures and attestations, verify, evaluate; two per
#                pull) against the pull, from the worker's log
#     --signature-format legacy|bundle   with --policy: how rdctl signs and attests (cosign v2's
#                .sig/.att tags, or cosign v3's sigstore bundle referrers; default legacy)
#     --runs N   runs per side (default 5)
#     --no-docs  print the table only (bench/out/worker.md), do not append to docs
#     --rates "R…"  link rates in Mbit/s for the rate-limited runs (default "1000 250"; "" for none)
# Needs: cargo, python3, GNU tar, skopeo, .tools/bin/umoci-0.6, /usr/bin/time (Debian `time`).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
QUICK=0
RUNS=5
DOCS=1
POLICY=0
SIG_FORMAT=legacy
RATES="1000 250"
SIZE_ARG=""
while [ $# -gt 0 ]; do
	case "$1" in
	--quick) QUICK=1; RUNS=3 ;;
	--runs) RUNS="$2"; shift ;;
	--no-docs) DOCS=0 ;;
	--policy) POLICY=1 ;;
	--signature-format) SIG_FORMAT="$2"; shift ;;
	--rates) RATES="$2"; shift ;;
	--size) SIZE_ARG="$2"; shift ;;
	-h | --help) sed -n '2,33p' "$0"; exit 0 ;;
	*) echo "unknown option $1" >&2; exit 2 ;;
	esac
	shift
done
if [ "$QUICK" = 1 ]; then
	SIZE_MIB=30 FILES=500
else
	SIZE_MIB=300 FILES=4000
fi
[ -z "$SIZE_ARG" ] || { SIZE_MIB=$SIZE_ARG; FILES=$((SIZE_ARG * 13)); }
UMOCI="$ROOT/.tools/bin/umoci-0.6"
for t in python3 tar skopeo curl jq "$UMOCI" /usr/bin/time; do
	command -v "$t" >/dev/null || { echo "bench/worker.sh needs $t (scripts/install-deps.sh installs it)" >&2; exit 2; }
done
OUT="$ROOT/bench/out/worker-$SIZE_MIB"
mkdir -p "$OUT"
cd "$ROOT"
if [ -n "${RDCTL_BIN:-}" ]; then
	RDCTL="$RDCTL_BIN"
else
	cargo build --release -q -p rdctl
	RDCTL="$ROOT/target/release/rdctl"
fi
ROOTLESS=()
[ "$(id -u)" = 0 ] || ROOTLESS=(--rootless)

# The image, made once per size (bench/out is kept between runs).
if [ ! -f "$OUT/image.done" ]; then
	rm -rf "$OUT/tree" "$OUT/image" "$OUT/layer.tar"
	python3 - "$SIZE_MIB" "$FILES" "$OUT/tree" <<'PY'
import os, random, sys
size_mib, files, tree = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
rng = random.Random(20240202)
vocab = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz_") for _ in range(rng.randint(2, 12)))
         for _ in range(4000)] + ["{", "}", "(", ")", ";", "=", "\n", "\n\t"]
corpus = " ".join(rng.choices(vocab, k=3_000_000)).encode()[: 16 << 20]
weights = [rng.lognormvariate(0, 1.2) for _ in range(files)]
scale = (size_mib << 20) / sum(weights)
for i, w in enumerate(weights):
    size = max(1, int(w * scale))
    d = os.path.join(tree, f"usr/share/bench/d{i // 100:03d}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i:05d}"), "wb") as f:
        if i % 10 == 9:  # one file in ten is binary (incompressible)
            f.write(rng.randbytes(size))
        else:
            off = rng.randrange(0, len(corpus) - min(size, len(corpus) - 1))
            data = corpus[off : off + size]
            while len(data) < size:
                data += corpus[: size - len(data)]
            f.write(data)
    if i % 50 == 0:
        os.symlink(f"f{i:05d}", os.path.join(d, f"link{i:05d}"))
PY
	tar --sort=name --numeric-owner --owner=0 --group=0 -C "$OUT/tree" -cf "$OUT/layer.tar" .
	"$UMOCI" init --layout "$OUT/image" >/dev/null
	"$UMOCI" new --image "$OUT/image:base" >/dev/null
	"$UMOCI" config --image "$OUT/image:base" --tag cfg --os illumos --config.cmd /bin/true --config.stopsignal SIGTERM >/dev/null
	"$UMOCI" raw add-layer --image "$OUT/image:cfg" --tag bench "$OUT/layer.tar" >/dev/null
	rm -f "$OUT/layer.tar"
	touch "$OUT/image.done"
fi
TREE_BYTES=$(du -sb "$OUT/tree" | cut -f1)
TREE_FILES=$(find "$OUT/tree" -type f | wc -l)
LAYER_BYTES=$(find "$OUT/image/blobs/sha256" -type f -printf '%s\n' | sort -n | tail -1)

# The registry, fresh for each invocation; stopped on exit.
rm -rf "$OUT/registry"
# Emptied here, not by the background job's redirection, which may run after the first read.
: >"$OUT/registry.log"
"$RDCTL" registry serve --listen 127.0.0.1:0 --data "$OUT/registry" 2>"$OUT/registry.log" &
REG_PID=$!
PROXY_PIDS=()
TRASH=""
# On any exit: stop the servers, and delete the runs' trees moved aside (gigabytes).
trap 'kill $REG_PID ${PROXY_PIDS[*]} 2>/dev/null || true; [ -z "$TRASH" ] || rm -rf "$TRASH"' EXIT
HOST=""
for _ in $(seq 100); do
	HOST=$(sed -n 's/.*registry listening on \([0-9.:]*\).*/\1/p' "$OUT/registry.log" 2>/dev/null | head -1) || true
	[ -n "$HOST" ] && break
	sleep 0.1
done
[ -n "$HOST" ] || { echo "the registry did not start:" >&2; cat "$OUT/registry.log" >&2; exit 1; }
REF="$HOST/bench/worker:1"
skopeo --insecure-policy copy -q --dest-tls-verify=false "oci:$OUT/image:bench" "docker://$REF"

mkdir -p "$OUT/node/zones"
cat >"$OUT/node/worker.toml" <<EOF
zones_dir = "zones"
state_dir = "state"
worker_id = "bench"
[provisioner]
kind = "dir"
base = "roots"
EOF
printf 'name = "bench"\nimage = "%s"\npull_policy = "Always"\n' "$REF" >"$OUT/node/zones/bench.toml"
if [ "$POLICY" = 1 ]; then
	rm -f "$OUT/node/bench.key" "$OUT/node/bench.pub"
	(cd "$OUT/node" && "$RDCTL" key generate --format pkcs8 --no-password --output-key-prefix bench >/dev/null)
	printf '{"spdxVersion":"SPDX-2.3","SPDXID":"SPDXRef-DOCUMENT","name":"bench","packages":[]}' >"$OUT/node/sbom.json"
	printf '{"buildDefinition":{"buildType":"https://example.invalid/bench"},"runDetails":{"builder":{"id":"https://example.invalid/bench"}}}' >"$OUT/node/prov.json"
	"$RDCTL" sign --format "$SIG_FORMAT" --key "$OUT/node/bench.key" "$REF" >/dev/null
	"$RDCTL" attest --format "$SIG_FORMAT" --key "$OUT/node/bench.key" --type spdxjson --predicate "$OUT/node/sbom.json" "$REF" >/dev/null
	"$RDCTL" attest --format "$SIG_FORMAT" --key "$OUT/node/bench.key" --type slsaprovenance1 --predicate "$OUT/node/prov.json" "$REF" >/dev/null
	printf '[[rule]]\nmatch = "**/bench/*"\naction = "signed"\nkeys = ["bench.pub"]\nrequire_attestations = ["spdxjson", "slsaprovenance1"]\n' >"$OUT/node/policy.toml"
	sed -i '1i policy = "policy.toml"' "$OUT/node/worker.toml"
fi

timed() { # "seconds peak_rss_kib cpu_seconds" of a command (its largest process, for pipelines)
	local log="$OUT/time.log"
	/usr/bin/time -v -o "$log" "$@" >/dev/null 2>"$OUT/cmd.err" || { cat "$OUT/cmd.err" >&2; return 1; }
	local wall rss
	wall=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$log" |
		awk -F: '{ if (NF == 3) print $1 * 3600 + $2 * 60 + $3; else print $1 * 60 + $2 }')
	rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$log")
	cpu=$(awk -F': ' '/User time|System time/ { s += $2 } END { printf "%.2f", s }' "$log")
	echo "$wall $rss $cpu"
}
stats() { # list of numbers -> "min median max"
	printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2; printf "%.2f %.2f %.2f", a[1], m, a[NR] }'
}
max() { printf '%s\n' "$@" | sort -g | tail -1; }

# The blobs a pull downloads, for the curl side.
BLOB_URLS=$(curl -sf -H 'Accept: application/vnd.oci.image.manifest.v1+json' "http://$HOST/v2/bench/worker/manifests/1" |
	jq -r --arg u "http://$HOST/v2/bench/worker/blobs/" '[.config.digest] + [.layers[].digest] | .[] | $u + .')
download="for u in $(echo $BLOB_URLS); do curl -sf -o /dev/null \$u & done; wait"
peer="mkdir -p $OUT/peer && skopeo --insecure-policy copy -q --src-tls-verify=false docker://$REF oci:$OUT/peer/image:1 && $UMOCI raw unpack ${ROOTLESS[*]} --image $OUT/peer/image:1 $OUT/peer/root"
a_t=() a_r=() a_c=() b_t=() b_r=() c_t=() p_t=() d_t=()
TRASH=$(mktemp -d "$OUT/trash.XXXXXX")
for i in $(seq "$RUNS"); do
	# The previous run's trees are moved aside, not deleted: ext4 skips recently deleted inodes
	# when it creates files, and with 4000 files just removed that search took about a third
	# of either side's time (perf: recently_deleted under ext4_create). They are deleted after
	# the last run. `sync` first, so no side pays for the other's writeback.
	[ ! -e "$OUT/node/state" ] || mv "$OUT/node/state" "$TRASH/state-$i"
	[ ! -e "$OUT/node/roots" ] || mv "$OUT/node/roots" "$TRASH/roots-$i"
	sync
	read -r t r c < <(RDCTL_LOG=info NO_COLOR=1 timed "$RDCTL" worker run --once --config "$OUT/node/worker.toml")
	a_t+=("$t") a_r+=("$r") a_c+=("$c")
	if [ "$POLICY" = 1 ]; then
		# took_ms of the two admission checks and of the pull, from the worker's log.
		grep -q 'admitted=true' "$OUT/cmd.err" || { echo "the policy did not admit the image:" >&2; cat "$OUT/cmd.err" >&2; exit 1; }
		for ms in $(grep 'admission check' "$OUT/cmd.err" | grep -o 'took_ms=[0-9.]*' | cut -d= -f2); do c_t+=("$ms"); done
		p_t+=("$(grep 'pull done' "$OUT/cmd.err" | grep -o 'took_ms=[0-9.]*' | cut -d= -f2)")
	fi
	[ ! -e "$OUT/peer" ] || mv "$OUT/peer" "$TRASH/peer-$i"
	sync
	read -r t r _ < <(timed sh -c "$peer")
	b_t+=("$t") b_r+=("$r")
	read -r t r _ < <(timed sh -c "$download")
	d_t+=("$t")
	echo "run $i: rdctl worker ${a_t[-1]} s, skopeo+umoci ${b_t[-1]} s, curl download ${d_t[-1]} s" >&2
done
# The rate-limited link: a proxy on loopback that passes responses at RATE Mbit/s in all (one
# schedule for every connection, 128 KiB at a time), requests as they come.
cat >"$OUT/ratelimit.py" <<'PY'
import asyncio, sys, time
upstream_host, upstream_port, rate = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]) * 1e6 / 8
state = {"next": 0.0}
async def take(n):
    now = time.monotonic()
    start = max(now, state["next"])
    state["next"] = start + n / rate
    if start > now:
        await asyncio.sleep(start - now)
async def pipe(r, w, limited):
    try:
        while True:
            data = await r.read(128 << 10)
            if not data:
                break
            if limited:
                await take(len(data))
            w.write(data)
            await w.drain()
        w.write_eof()
    except (ConnectionError, OSError):
        pass
async def serve(cr, cw):
    try:
        ur, uw = await asyncio.open_connection(upstream_host, upstream_port)
    except OSError:
        cw.close()
        return
    await asyncio.gather(pipe(cr, uw, False), pipe(ur, cw, True))
    for w in (cw, uw):
        w.close()
async def main():
    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()
asyncio.run(main())
PY
RATE_ROWS=()
for rate in $RATES; do
	rm -f "$OUT/proxy-$rate.port"
	python3 "$OUT/ratelimit.py" "${HOST%:*}" "${HOST##*:}" "$rate" >"$OUT/proxy-$rate.port" &
	PROXY_PIDS+=($!)
	for _ in $(seq 300); do [ -s "$OUT/proxy-$rate.port" ] && break; sleep 0.1; done
	[ -s "$OUT/proxy-$rate.port" ] || { echo "the $rate Mbit/s proxy did not start" >&2; exit 1; }
	PHOST="127.0.0.1:$(cat "$OUT/proxy-$rate.port")"
	printf 'name = "bench"\nimage = "%s"\npull_policy = "Always"\n' "$PHOST/bench/worker:1" >"$OUT/node/zones/bench.toml"
	p_download="for u in $(echo $BLOB_URLS | sed "s#http://$HOST/#http://$PHOST/#g"); do curl -sf -o /dev/null \$u & done; wait"
	w_t=() w_c=() l_t=()
	for i in $(seq "$RUNS"); do
		[ ! -e "$OUT/node/state" ] || mv "$OUT/node/state" "$TRASH/state-$rate-$i"
		[ ! -e "$OUT/node/roots" ] || mv "$OUT/node/roots" "$TRASH/roots-$rate-$i"
		sync
		read -r t r c < <(RDCTL_LOG=info NO_COLOR=1 timed "$RDCTL" worker run --once --config "$OUT/node/worker.toml")
		w_t+=("$t") w_c+=("$c")
		# An overlapped unpack that had to be redone from the store would time two unpacks.
		! grep -q 'unpacking again' "$OUT/cmd.err" || echo "$rate Mbit/s run $i: the worker unpacked twice" >&2
		read -r t r _ < <(timed sh -c "$p_download")
		l_t+=("$t")
		echo "$rate Mbit/s run $i: rdctl worker ${w_t[-1]} s, curl download ${l_t[-1]} s" >&2
	done
	diff -r --no-dereference "$OUT/node/roots/bench/root/usr" "$OUT/tree/usr" >/dev/null ||
		{ echo "the worker's root through the $rate Mbit/s proxy differs from the tree" >&2; exit 1; }
	read -r wmin wmed wmax <<<"$(stats "${w_t[@]}")"
	read -r lmin lmed lmax <<<"$(stats "${l_t[@]}")"
	read -r _ cmed _ <<<"$(stats "${w_c[@]}")"
	RATE_ROWS+=("| $rate Mbit/s ($(awk -v r="$rate" 'BEGIN { printf "%.1f", r / 8 }') MB/s) | $wmin / $wmed / $wmax | $lmin / $lmed / $lmax | $(awk -v a="$wmed" -v d="$lmed" 'BEGIN { printf "%.2f", a / d }')× | $cmed |")
done
printf 'name = "bench"\nimage = "%s"\npull_policy = "Always"\n' "$REF" >"$OUT/node/zones/bench.toml"
rm -rf "$TRASH"
# Both produced the same tree (a cheap check that the runs did the same work).
diff -r --no-dereference "$OUT/node/roots/bench/root/usr" "$OUT/peer/root/usr" >/dev/null ||
	{ echo "the worker's root and umoci's differ" >&2; exit 1; }

read -r amin amed amax <<<"$(stats "${a_t[@]}")"
read -r bmin bmed bmax <<<"$(stats "${b_t[@]}")"
ratio=$(awk -v a="$amed" -v b="$bmed" 'BEGIN { printf "%.2f", a / b }')
speedup=$(awk -v a="$amed" -v b="$bmed" 'BEGIN { printf "%.1f", b / a }')
read -r dmin dmed dmax <<<"$(stats "${d_t[@]}")"
dratio=$(awk -v a="$amed" -v d="$dmed" 'BEGIN { printf "%.2f", a / d }')
CPU=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
MACHINE="Machine: $CPU, $(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg) at the end; $(rustc --version); $(skopeo --version); $("$UMOCI" --version | head -1); owners $([ ${#ROOTLESS[@]} = 0 ] && echo applied || echo 'not applied (--rootless)'); $RUNS runs each, interleaved; $(date -u +%Y-%m-%d)."
TABLE="$OUT/../worker.md"
{
	echo
	echo "### $((TREE_BYTES / 1048576)) MiB in $TREE_FILES files, $((LAYER_BYTES / 1048576)) MiB gzip layer ($(git -C "$ROOT" rev-parse --short HEAD))"
	echo
	echo "$MACHINE"
	echo
	echo "| ratio (worker / peer, median) | speed-up | rdctl worker run --once s (min/median/max) | skopeo copy + umoci raw unpack s (min/median/max) | worker / download (median; goal ≤ 1.3×) | download: curl, all blobs at once, s (min/median/max) | worker peak RSS | peer peak RSS (largest process) |"
	echo "|---|---|---|---|---|---|---|---|"
	echo "| ${ratio}× | ${speedup}× | $amin / $amed / $amax | $bmin / $bmed / $bmax | ${dratio}× | $dmin / $dmed / $dmax | $(($(max "${a_r[@]}") / 1024)) MiB | $(($(max "${b_r[@]}") / 1024)) MiB |"
	echo
	if [ ${#RATE_ROWS[@]} -gt 0 ]; then
		echo "Through a rate-limiting proxy on loopback (one limit for all of a side's connections; goal: worker ≤ 1.3× the download):"
		echo
		echo "| link | rdctl worker run --once s (min/median/max) | download: curl, all blobs at once, s (min/median/max) | worker / download (median) | worker CPU s, user + system (median) |"
		echo "|---|---|---|---|---|"
		echo "| loopback, no limit | $amin / $amed / $amax | $dmin / $dmed / $dmax | ${dratio}× | $(stats "${a_c[@]}" | cut -d' ' -f2) |"
		printf '%s\n' "${RATE_ROWS[@]}"
		echo
	fi
	if [ "$POLICY" = 1 ]; then
		read -r cmin cmed cmax <<<"$(stats "${c_t[@]}")"
		read -r pmin pmed pmax <<<"$(stats "${p_t[@]}")"
		echo
		echo "With an admission policy (one \`signed\` rule, one key, two required attestations; the worker times above include it):"
		echo
		echo "| admission check ms (min/median/max, ${#c_t[@]} checks, 2 per pull) | pull ms (min/median/max) | both checks / pull (median) |"
		echo "|---|---|---|"
		echo "| $cmin / $cmed / $cmax | $pmin / $pmed / $pmax | $(awk -v c="$cmed" -v p="$pmed" 'BEGIN { printf "%.2f %%", 200 * c / p }') |"
	fi
	echo
	echo "Reproduce: \`bench/worker.sh$([ "$QUICK" = 1 ] && echo ' --quick')$([ "$POLICY" = 1 ] && echo ' --policy')$([ -n "$SIZE_ARG" ] && echo " --size $SIZE_ARG") --runs $RUNS --rates \"$RATES\"\`"
} >"$TABLE"
cat "$TABLE"
if [ "$DOCS" = 1 ]; then
	if ! grep -q '^## Worker pull, verify and unpack' "$ROOT/docs/benchmarks.md"; then
		cat >>"$ROOT/docs/benchmarks.md" <<'EOF'

## Worker pull, verify and unpack

`rdctl worker run --once` with the `dir` provisioner (resolve the tag, pull manifest, config and
layer into the content store verifying size and digest while streaming, unpack with the DiffID
check into a staging root, provision) against `skopeo copy docker://… oci:…` followed by `umoci
raw unpack` of the same image from the same `rdctl registry serve` on loopback, both into empty
destinations every run, made by `bench/worker.sh`. Goal: ≥ 2× faster (ratio ≤ 0.5×).
EOF
	fi
	cat "$TABLE" >>"$ROOT/docs/benchmarks.md"
fi
