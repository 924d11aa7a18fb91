#!/usr/bin/env bash
# Benchmark: `rdctl build` of one image layer from IPS packages against
# `tar --sort=name -c TREE | pigz -p2 -LEVEL` on the same file tree (and against
# `tar | zstd -T2 -LEVEL` for zstd layers). The tree (about 200 MiB in 5,000 files: text that
# compresses about 3:1 and some incompressible binaries) is generated deterministically and
# published as 10 IPS packages with `rdctl ips publish`; publishing and locking are not timed.
# rdctl does more than tar|pigz: it gunzips and verifies every payload against its hashes,
# merges accounts, writes var/pkg, an SBOM and the OCI layout, and validates its own output
# deeply (a second gunzip of the layer) before it succeeds.
# Runs A/B interleaved, prints min/median/max seconds, the ratio of medians and each side's
# peak RSS and CPU seconds (/usr/bin/time -v), and appends the table to docs/benchmarks.md.
#   bench/builder.sh [--quick] [--size MIB] [--runs N] [--no-docs] [--prepare]
#                                                          (RDCTL_BIN=PATH: use that rdctl)
#     --quick    about 20 MiB in 500 files, 3 runs (a smoke run: seconds, not minutes)
#     --size MIB a tree of about MIB MiB, 25 files per MiB (the default tree's density)
#     --files N  that many files instead (with --size: separates per-file from per-byte costs)
#     --runs N   runs per side (default 5)
#     --no-docs  print the table only (bench/out/builder.md), do not append to docs
#     --prepare  make the tree, packages and locked image files, print their directory
#                (bench/out/builder-MIB) and stop (bench/memory.sh builds from it)
# Needs: cargo, python3, GNU tar, pigz, zstd, /usr/bin/time (Debian `time`).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
QUICK=0
RUNS=5
DOCS=1
PREPARE=0
SIZE_ARG=""
FILES_ARG=""
while [ $# -gt 0 ]; do
	case "$1" in
	--quick) QUICK=1; RUNS=3 ;;
	--runs) RUNS="$2"; shift ;;
	--no-docs) DOCS=0 ;;
	--size) SIZE_ARG="$2"; shift ;;
	--files) FILES_ARG="$2"; shift ;;
	--prepare) PREPARE=1 ;;
	-h | --help) sed -n '2,21p' "$0"; exit 0 ;;
	*) echo "unknown option $1" >&2; exit 2 ;;
	esac
	shift
done
if [ "$QUICK" = 1 ]; then
	SIZE_MIB=20 FILES=500
else
	SIZE_MIB=200 FILES=5000
fi
[ -z "$SIZE_ARG" ] || { SIZE_MIB=$SIZE_ARG; FILES=$((SIZE_ARG * 25)); }
for t in python3 tar pigz zstd /usr/bin/time; do
	command -v "$t" >/dev/null || { echo "bench/builder.sh needs $t (scripts/install-deps.sh installs it)" >&2; exit 2; }
done
OUT="$ROOT/bench/out/builder-$SIZE_MIB"
[ -z "$FILES_ARG" ] || { FILES=$FILES_ARG; OUT="$OUT-${FILES}f"; }
mkdir -p "$OUT"
cd "$ROOT"
# RDCTL_BIN=PATH uses that binary instead of building target/release/rdctl.
if [ -n "${RDCTL_BIN:-}" ]; then
	RDCTL="$RDCTL_BIN"
else
	cargo build --release -q -p rdctl
	RDCTL="$ROOT/target/release/rdctl"
fi
GZ_LEVEL=6
ZSTD_LEVEL=3

# The tree and the packages, made once per size (bench/out is kept between runs).
if [ ! -f "$OUT/published" ]; then
	rm -rf "$OUT/tree" "$OUT/repo" "$OUT/manifests"
	python3 - "$SIZE_MIB" "$FILES" "$OUT" <<'PY'
import os, random, sys
size_mib, files, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
rng = random.Random(20240101)
tree, mans = os.path.join(out, "tree"), os.path.join(out, "manifests")
os.makedirs(mans)
# A 16 MiB corpus of "source text" from a fixed vocabulary; files are slices of it.
vocab = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz_") for _ in range(rng.randint(2, 12)))
         for _ in range(4000)] + ["{", "}", "(", ")", ";", "=", "return", "if", "\n", "\n\t"]
corpus = " ".join(rng.choices(vocab, k=3_000_000)).encode()[: 16 << 20]
weights = [rng.lognormvariate(0, 1.2) for _ in range(files)]
scale = (size_mib << 20) / sum(weights)
sizes = [max(1, int(w * scale)) for w in weights]
pkgs = 10
per_pkg = [[] for _ in range(pkgs)]
for i, size in enumerate(sizes):
    d = f"usr/share/bench/d{i // 100:03d}"
    path = f"{d}/f{i:05d}"
    os.makedirs(os.path.join(tree, d), exist_ok=True)
    with open(os.path.join(tree, path), "wb") as f:
        if i % 10 == 9:  # one file in ten is binary (incompressible)
            f.write(rng.randbytes(size))
        else:
            off = rng.randrange(0, len(corpus) - min(size, len(corpus) - 1))
            data = corpus[off : off + size]
            while len(data) < size:
                data += corpus[: size - len(data)]
            f.write(data)
    per_pkg[(i // 100) % pkgs].append(path)
for p, paths in enumerate(per_pkg):
    dirs = sorted({"/".join(x.split("/")[:k]) for x in paths for k in range(1, x.count("/") + 1)})
    with open(os.path.join(mans, f"p{p}.p5m"), "w") as m:
        m.write(f"set name=pkg.fmri value=pkg:/bench/p{p}@1.0,5.11-1:20240101T000000Z\n")
        m.write(f"set name=pkg.summary value=\"benchmark package {p}\"\n")
        for d in dirs:
            m.write(f"dir path={d} mode=0755 owner=root group=bin\n")
        for x in paths:
            m.write(f"file path={x} mode=0644 owner=root group=bin\n")
PY
	for m in "$OUT"/manifests/*.p5m; do
		"$RDCTL" ips publish --repo "$OUT/repo" --publisher bench.example --proto "$OUT/tree" "$m" >/dev/null
	done
	for alg in gzip zstd; do
		level=$GZ_LEVEL
		[ "$alg" = zstd ] && level=$ZSTD_LEVEL
		mkdir -p "$OUT/$alg"
		cat >"$OUT/$alg/image.toml" <<EOF
tags = ["bench"]
platform = "illumos/amd64"
[publishers]
"bench.example" = "../repo"
[packages]
include = ["bench/p0", "bench/p1", "bench/p2", "bench/p3", "bench/p4", "bench/p5", "bench/p6", "bench/p7", "bench/p8", "bench/p9"]
[compression]
algorithm = "$alg"
level = $level
EOF
		"$RDCTL" lock "$OUT/$alg/image.toml" >/dev/null 2>&1
	done
	touch "$OUT/published"
fi
if [ "$PREPARE" = 1 ]; then
	echo "$OUT"
	exit 0
fi
TREE_BYTES=$(du -sb "$OUT/tree" | cut -f1)
TREE_FILES=$(find "$OUT/tree" -type f | wc -l)

# One timed run: "seconds peak_rss_kib cpu_seconds" of a command (peak RSS of its largest
# process, for pipelines; CPU is user + sys of it and every child it waited for).
timed() {
	local log="$OUT/time.log"
	/usr/bin/time -v -o "$log" "$@" >/dev/null
	local wall rss cpu
	wall=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$log" |
		awk -F: '{ if (NF == 3) print $1 * 3600 + $2 * 60 + $3; else print $1 * 60 + $2 }')
	rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$log")
	cpu=$(awk -F': ' '/(User|System) time \(seconds\)/ { s += $2 } END { printf "%.2f", s }' "$log")
	echo "$wall $rss $cpu"
}

stats() { # list of numbers -> "min median max"
	printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2; printf "%.2f %.2f %.2f", a[1], m, a[NR] }'
}

max() { printf '%s\n' "$@" | sort -g | tail -1; }

ROWS=()
for alg in gzip zstd; do
	if [ "$alg" = gzip ]; then
		peer_name="tar --sort=name -c | pigz -p2 -$GZ_LEVEL"
		peer=(sh -c "tar --sort=name -C '$OUT/tree' -cf - . | pigz -p2 -$GZ_LEVEL > '$OUT/peer.tar.gz'")
		level=$GZ_LEVEL
	else
		peer_name="tar --sort=name -c | zstd -T2 -$ZSTD_LEVEL"
		peer=(sh -c "tar --sort=name -C '$OUT/tree' -cf - . | zstd -q -T2 -$ZSTD_LEVEL > '$OUT/peer.tar.zst'")
		level=$ZSTD_LEVEL
	fi
	a_t=() a_r=() a_c=() b_t=() b_r=() b_c=()
	for i in $(seq "$RUNS"); do
		# `sync` before each side, so neither pays for the other's writeback (the previous
		# run's layout or archive, about 100 MiB, and the tree just removed).
		rm -rf "$OUT/$alg/out"
		sync
		read -r t r c < <(timed "$RDCTL" build "$OUT/$alg/image.toml" --output "$OUT/$alg/out")
		a_t+=("$t") a_r+=("$r") a_c+=("$c")
		sync
		read -r t r c < <(timed "${peer[@]}")
		b_t+=("$t") b_r+=("$r") b_c+=("$c")
		echo "$alg run $i: rdctl ${a_t[-1]} s (CPU ${a_c[-1]} s), peer ${b_t[-1]} s (CPU ${b_c[-1]} s)" >&2
	done
	layer=$(find "$OUT/$alg/out/blobs/sha256" -type f -size +1M -printf '%s\n' | sort -n | tail -1)
	peer_size=$(stat -c %s "$OUT"/peer.tar.*)
	read -r amin amed amax <<<"$(stats "${a_t[@]}")"
	read -r bmin bmed bmax <<<"$(stats "${b_t[@]}")"
	read -r _ acpu _ <<<"$(stats "${a_c[@]}")"
	read -r _ bcpu _ <<<"$(stats "${b_c[@]}")"
	ratio=$(awk -v a="$amed" -v b="$bmed" 'BEGIN { printf "%.2f", a / b }')
	ROWS+=("| $alg -$level | ${ratio}× | $amin / $amed / $amax | $bmin / $bmed / $bmax | $acpu / $bcpu | $(($(max "${a_r[@]}") / 1024)) MiB | $(($(max "${b_r[@]}") / 1024)) MiB | $((layer / 1048576)) MiB / $((peer_size / 1048576)) MiB |")
	rm -f "$OUT"/peer.tar.*
done

CPU=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
MACHINE="Machine: $CPU, $(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg) at the end; $(rustc --version); $(tar --version | head -1); pigz $(pigz --version 2>&1 | awk '{print $2}'); zstd $(zstd --version | sed 's/.*v\([0-9.]*\).*/\1/'); $RUNS runs each, interleaved; $(date -u +%Y-%m-%d)."
TABLE="$OUT/../builder.md"
{
	echo
	echo "### $((TREE_BYTES / 1048576)) MiB in $TREE_FILES files ($(git -C "$ROOT" rev-parse --short HEAD))"
	echo
	echo "$MACHINE"
	echo
	echo "| layer | ratio (rdctl / peer, median) | rdctl build s (min/median/max) | peer s (min/median/max) | CPU s, user + sys (rdctl / peer, median) | rdctl peak RSS | peer peak RSS (largest process) | layer / peer output |"
	echo "|---|---|---|---|---|---|---|---|"
	printf '%s\n' "${ROWS[@]}"
	echo
	echo "Peers: gzip rows \`tar --sort=name -c | pigz -p2 -$GZ_LEVEL\`, zstd rows \`tar --sort=name -c | zstd -T2 -$ZSTD_LEVEL\`."
	echo "Reproduce: \`bench/builder.sh$([ "$QUICK" = 1 ] && echo ' --quick')$([ -n "$SIZE_ARG" ] && echo " --size $SIZE_ARG")$([ -n "$FILES_ARG" ] && echo " --files $FILES_ARG") --runs $RUNS\`"
} >"$TABLE"
cat "$TABLE"
if [ "$DOCS" = 1 ]; then
	if ! grep -q '^## Building an image layer' "$ROOT/docs/benchmarks.md"; then
		cat >>"$ROOT/docs/benchmarks.md" <<'EOF'

## Building an image layer

`rdctl build` of a one-layer image from 10 IPS packages against `tar --sort=name -c TREE | pigz
-p2` (gzip) and `tar --sort=name -c TREE | zstd -T2` (zstd) at the same level on the same tree,
made by `bench/builder.sh`. Goal: ≤ 1.0× the time, and peak memory that does not grow with the
image. rdctl does more work than the peer: it gunzips and verifies every IPS payload, writes
`var/pkg`, an SBOM and the OCI layout, and validates its own output deeply before it succeeds.
EOF
	fi
	cat "$TABLE" >>"$ROOT/docs/benchmarks.md"
fi
