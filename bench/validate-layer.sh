#!/usr/bin/env bash
# Benchmark: deep validation of one large gzip layer by `rdctl validate` against the shell
# pipeline doing the least comparable work, `sha256sum BLOB` plus `zcat BLOB | sha256sum`
# (rdctl also parses every tar header and checks the config and manifest). Runs A/B interleaved,
# prints min/median/max seconds, the ratio of medians, and each side's peak RSS, at two layer
# sizes to show that memory does not grow with the layer.
#   bench/validate-layer.sh [SIZE_MIB] [RUNS]     defaults: 1024 5
# Output: bench/out/validate-layer.md (a table ready for docs/benchmarks.md).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SIZE_MIB="${1:-1024}"
RUNS="${2:-5}"
OUT="$ROOT/bench/out/validate-layer"
mkdir -p "$OUT"
cd "$ROOT"
cargo build --release -q -p rdctl
RDCTL="$ROOT/target/release/rdctl"

# A layout with one gzip layer of about SIZE MiB uncompressed: many files of base64 text
# (compresses about 1.3:1, like binaries) in sorted order.
make_layout() { # size_mib dir
	local size=$1 dir=$2
	[ -f "$dir/done" ] && return 0
	rm -rf "$dir" && mkdir -p "$dir/tree"
	python3 - "$size" "$dir/tree" <<'PY'
import base64, os, random, sys
size_mib, root = int(sys.argv[1]), sys.argv[2]
rng = random.Random(42)
total, i = 0, 0
while total < size_mib << 20:
    d = os.path.join(root, f"d{i // 200:04d}")
    os.makedirs(d, exist_ok=True)
    n = rng.choice([4 << 10, 64 << 10, 1 << 20, 8 << 20])
    with open(os.path.join(d, f"f{i:06d}"), "wb") as f:
        f.write(base64.b64encode(rng.randbytes(n * 3 // 4)))
    total += n
    i += 1
PY
	tar --sort=name --numeric-owner --owner=0 --group=0 -C "$dir/tree" -cf "$dir/layer.tar" .
	pigz -6 -p 2 -n -c "$dir/layer.tar" > "$dir/layer.tar.gz"
	local diff blob bsize
	diff=$(sha256sum "$dir/layer.tar" | cut -d' ' -f1)
	blob=$(sha256sum "$dir/layer.tar.gz" | cut -d' ' -f1)
	bsize=$(stat -c %s "$dir/layer.tar.gz")
	rm -rf "$dir/tree" "$dir/layer.tar"
	local L="$dir/layout"
	mkdir -p "$L/blobs/sha256"
	mv "$dir/layer.tar.gz" "$L/blobs/sha256/$blob"
	printf '{"imageLayoutVersion":"1.0.0"}' > "$L/oci-layout"
	local cfg='{"architecture":"amd64","os":"illumos","config":{"Cmd":["/bin/true"]},"rootfs":{"type":"layers","diff_ids":["sha256:'"$diff"'"]}}'
	printf '%s' "$cfg" > "$dir/cfg"
	local cd cs
	cd=$(sha256sum "$dir/cfg" | cut -d' ' -f1); cs=$(stat -c %s "$dir/cfg")
	mv "$dir/cfg" "$L/blobs/sha256/$cd"
	local man='{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:'"$cd"'","size":'"$cs"'},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"sha256:'"$blob"'","size":'"$bsize"'}]}'
	printf '%s' "$man" > "$dir/man"
	local md ms
	md=$(sha256sum "$dir/man" | cut -d' ' -f1); ms=$(stat -c %s "$dir/man")
	mv "$dir/man" "$L/blobs/sha256/$md"
	printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s}]}' "$md" "$ms" > "$L/index.json"
	echo "$L/blobs/sha256/$blob" > "$dir/blob-path"
	touch "$dir/done"
}

# run_timed LABEL CMD... → appends "seconds rss_kib" to $OUT/LABEL.times
run_timed() {
	local label=$1
	shift
	/usr/bin/time -f '%e %M' -o "$OUT/.t" "$@" > /dev/null
	cat "$OUT/.t" >> "$OUT/$label.times"
}

stats() { # file column → "min median max"
	awk -v c="$2" '{print $c}' "$1" | sort -g | awk '{a[NR]=$1} END {printf "%s %s %s", a[1], a[int((NR+1)/2)], a[NR]}'
}

report=()
for size in "$SIZE_MIB" $((SIZE_MIB / 4)); do
	dir="$OUT/layer-$size"
	make_layout "$size" "$dir"
	blob=$(cat "$dir/blob-path")
	rm -f "$OUT"/a-$size.times "$OUT"/b-$size.times
	for _ in $(seq "$RUNS"); do
		run_timed "a-$size" "$RDCTL" validate "$dir/layout"
		run_timed "b-$size" bash -c "sha256sum '$blob' && zcat '$blob' | sha256sum"
	done
	read -r amin amed amax <<< "$(stats "$OUT/a-$size.times" 1)"
	read -r bmin bmed bmax <<< "$(stats "$OUT/b-$size.times" 1)"
	read -r _ arss _ <<< "$(stats "$OUT/a-$size.times" 2)"
	read -r _ brss _ <<< "$(stats "$OUT/b-$size.times" 2)"
	ratio=$(awk -v a="$amed" -v b="$bmed" 'BEGIN {printf "%.2f", a / b}')
	csize=$(( $(stat -c %s "$blob") >> 20 ))
	report+=("| ${ratio}× | $size MiB ($csize MiB gzip) | $amin / $amed / $amax | $bmin / $bmed / $bmax | $((arss / 1024)) MiB | $((brss / 1024)) MiB |")
done

{
	echo "Machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores; $(rustc --version); $(zcat --version | head -1); $(sha256sum --version | head -1); $RUNS runs each, interleaved."
	echo
	echo "| ratio (rdctl / shell, median) | layer | rdctl validate s (min/median/max) | sha256sum + zcat \\| sha256sum s (min/median/max) | rdctl peak RSS | shell peak RSS (largest process) |"
	echo "|---|---|---|---|---|---|"
	printf '%s\n' "${report[@]}"
	echo
	echo "Reproduce: \`bench/validate-layer.sh $SIZE_MIB $RUNS\`"
} | tee "$OUT/../validate-layer.md"
