# Shared by bench/run.sh, bench/memory.sh and bench/growth.sh (sourced, not run): starting our registry, CNCF
# distribution and one SeaweedFS on loopback, and reading a server's peak RSS.
#
# The sides of a comparison: `ours`, `dist` (CNCF distribution v3, the main peer: what users
# deploy today, built by scripts/install-deps.sh into .tools/bin/distribution-v3) and `dist28`
# (Debian's docker-registry, distribution 2.8, kept as a second column). BENCH_PEERS narrows the
# peers ("dist" alone halves a run); DIST3_BIN runs another v3 build.
# The caller calls `bench_scratch` (WORK, a scratch directory for configs and logs, and PIDS,
# every process started here, killed on exit) and sets RDCTL (the rdctl binary) and WEED
# (the weed binary).

# bench_scratch PREFIX: sets WORK to a new scratch directory and PIDS=(); on exit every
# process in PIDS is killed and WORK removed.
bench_scratch() {
	WORK="$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")"
	PIDS=()
	trap bench_cleanup EXIT
}
bench_cleanup() {
	local p
	for p in "${PIDS[@]}"; do
		kill -9 "$p" 2> /dev/null || true
		wait "$p" 2> /dev/null || true
	done
	rm -rf "$WORK"
}

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

wait_http() { # url — until it answers anything but a connection error (60 s)
	local i
	for i in $(seq 300); do
		curl -s -o /dev/null "$1" && return 0
		sleep 0.2
	done
	echo "$(basename "$0"): $1 did not answer; logs in $WORK" >&2
	tail -n 20 "$WORK"/*.log >&2 || true
	exit 1
}

STARTED_PID=""
# start_ours NAME PORT ARGS... ; sets STARTED_PID
start_ours() {
	local name=$1 port=$2
	shift 2
	RDCTL_LOG=${RDCTL_LOG:-warn} "$RDCTL" registry serve --listen "127.0.0.1:$port" "$@" >> "$WORK/$name.log" 2>&1 &
	STARTED_PID=$!
	PIDS+=("$STARTED_PID")
	wait_http "http://127.0.0.1:$port/v2/"
}

BENCH_PEERS="${BENCH_PEERS:-dist dist28}"
SERVERS="ours $BENCH_PEERS"
DIST3_BIN="${DIST3_BIN:-${ROOT:?}/.tools/bin/distribution-v3}"

# dist_program SIDE: the binary of a distribution side.
dist_program() {
	case "$1" in
	dist) echo "$DIST3_BIN" ;;
	dist28) echo docker-registry ;;
	*) echo "$(basename "$0"): no distribution side named $1" >&2; exit 2 ;;
	esac
}
# dist_version SIDE: its version line, for the report's machine line.
dist_version() { "$(dist_program "$1")" --version 2>&1 | head -1; }
# check_peers: every side of BENCH_PEERS can run, or the script stops naming the missing one.
check_peers() {
	local p prog
	for p in $BENCH_PEERS; do
		prog=$(dist_program "$p")
		command -v "$prog" > /dev/null || {
			echo "$(basename "$0"): $prog ($p) is missing; run scripts/install-deps.sh" >&2
			exit 1
		}
	done
}

# start_dist SIDE NAME PORT STORAGE_YAML ; sets STARTED_PID. No blob descriptor cache (our
# registry has none either), deletes enabled, redirects off (bytes flow through the registry
# on both sides), logs at error level. Both versions read the same configuration.
start_dist() {
	local side=$1 name=$2 port=$3 storage=$4
	cat > "$WORK/$name.yml" <<-EOC
		version: 0.1
		log:
		  level: error
		  accesslog:
		    disabled: true
		storage:
		$storage
		  delete:
		    enabled: true
		  redirect:
		    disable: true
		  maintenance:
		    uploadpurging:
		      enabled: false
		http:
		  addr: 127.0.0.1:$port
	EOC
	# Without AWS_CA_BUNDLE: distribution 2.8's aws-sdk-go panics at start when it is set
	# ("LoadCustomCABundleError ... transport unsupported type"); plain HTTP needs no CA.
	env -u AWS_CA_BUNDLE "$(dist_program "$side")" serve "$WORK/$name.yml" >> "$WORK/$name.log" 2>&1 &
	STARTED_PID=$!
	PIDS+=("$STARTED_PID")
	wait_http "http://127.0.0.1:$port/v2/"
}

stop_pid() {
	kill "$1" 2> /dev/null || true
	wait "$1" 2> /dev/null || true
}

hwm() { awk '/VmHWM/{print $2}' "/proc/$1/status"; }
# cpu_secs PID: the CPU time (user + system) a process has used so far, in seconds. A cell's
# server CPU is the difference around the operation: the server's cost per byte, which is what
# scales, whoever's client is the bottleneck in wall time.
cpu_secs() {
	awk -v hz="$(getconf CLK_TCK)" '{ split($0, a, ") "); split(a[2], f, " "); printf "%.3f", (f[12] + f[13]) / hz }' "/proc/$1/stat"
}
# cpu_since PID START: the CPU seconds PID used since cpu_secs printed START.
cpu_since() { echo "$(cpu_secs "$1") - $2" | bc -l; }
# Resets the peak RSS counter (VmHWM) of a process we started.
reset_hwm() { echo 5 > "/proc/$1/clear_refs"; }

order() { # run → the sides of SERVERS, rotated by the run so each goes first in turn
	local -a s
	read -ra s <<< "$SERVERS"
	local n=${#s[@]} i out=()
	for ((i = 0; i < n; i++)); do out+=("${s[$(((i + $1) % n))]}"); done
	echo "${out[*]}"
}

fs_server() { # server dir port ; sets STARTED_PID
	if [ "$1" = ours ]; then
		start_ours "ours-fs" "$3" --data "$2"
	else
		start_dist "$1" "$1-fs" "$3" "  filesystem:
    rootdirectory: $2"
	fi
}

# weed_start: one `weed server -s3` in $WORK/weed; sets WEED_PID, S3URL, WS (its S3 port), WM
# (master port) and WF (filer port).
weed_start() {
	local wdir="$WORK/weed" i
	mkdir -p "$wdir"
	# As s3-fixtures/src/seaweed.rs: 2 volumes per new collection (each bucket is one), many
	# small volumes allowed, no telemetry, no Iceberg/Lance listeners.
	printf '[master.volume_growth]\ncopy_1 = 2\ncopy_2 = 2\ncopy_3 = 1\ncopy_other = 1\n' > "$wdir/master.toml"
	WM=$(wport); local wv; wv=$(wport); WF=$(wport); WS=$(wport)
	(cd "$wdir" && exec env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY "$WEED" server -dir="$wdir" \
		-ip=127.0.0.1 -ip.bind=127.0.0.1 \
		-master.port="$WM" -master.port.grpc=$((WM + 10000)) \
		-volume.port="$wv" -volume.port.grpc=$((wv + 10000)) \
		-filer.port="$WF" -filer.port.grpc=$((WF + 10000)) -filer.localSocket="$wdir/filer.sock" \
		-s3 -s3.port="$WS" -s3.port.grpc=$((WS + 10000)) -s3.port.iceberg=0 -s3.port.lance=0 \
		-master.telemetry=false -volume.max=2000 -master.volumeSizeLimitMB=64 -volume.preStopSeconds=0 \
		-volume.minFreeSpace=256MiB \
		> "$WORK/weed.log" 2>&1) &
	WEED_PID=$!
	PIDS+=("$WEED_PID")
	for i in $(seq 450); do
		[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$WS/healthz")" = 200 ] && break
		[ "$i" = 450 ] && { echo "$(basename "$0"): SeaweedFS did not start" >&2; tail -30 "$WORK/weed.log" >&2; exit 1; }
		sleep 0.2
	done
	S3URL="http://127.0.0.1:$WS"
}
wport() { # a port whose +10000 (gRPC) is free too
	local p
	while :; do
		p=$(free_port)
		[ "$p" -lt 55000 ] && ! (echo > "/dev/tcp/127.0.0.1/$((p + 10000))") 2> /dev/null && { echo "$p"; return; }
	done
}
bucket_new() { # name — creates it (retries: the first bucket can race volume growth)
	local i
	for i in $(seq 20); do
		[ "$(curl -s -o /dev/null -w '%{http_code}' -X PUT "$S3URL/$1")" = 200 ] && return 0
		sleep 0.5
	done
	echo "$(basename "$0"): cannot create bucket $1" >&2
	exit 1
}
bucket_drop() { # name — frees the disk: the bucket's files, then its volumes (collection)
	curl -s -o /dev/null -X DELETE "http://127.0.0.1:$WF/buckets/$1?recursive=true&ignoreRecursiveError=true" || true
	curl -s -o /dev/null "http://127.0.0.1:$WM/col/delete?collection=$1" || true
}
s3_server() { # server endpoint bucket port ; sets STARTED_PID
	if [ "$1" = ours ]; then
		start_ours "ours-s3" "$4" --s3-endpoint "$2" --s3-bucket "$3"
	else
		# forcepathstyle: v3's driver addresses BUCKET.HOST otherwise (2.8 always used the path).
		start_dist "$1" "$1-s3" "$4" "  s3:
    accesskey: bench
    secretkey: bench-secret
    region: us-east-1
    regionendpoint: $2
    forcepathstyle: true
    bucket: $3
    secure: false
    v4auth: true"
	fi
}

# make_image DIR LAYER_MIB: an OCI layout of two incompressible gzip layers, tagged `bench`;
# prints its bytes. Made once per run of a script and not timed (bench/run.sh, bench/profile.sh).
# Gzip, not the uncompressed tar media type: skopeo (containers/image) compresses an
# uncompressed layer itself on its way to a registry, so with plain layers its push timed its
# own gzip of 512 MiB (4.5 of its 5 CPU seconds), not the registry.
make_image() { # dir layer_mib
	python3 - "$1" "$2" <<-'PY'
		import gzip, hashlib, json, os, sys
		out, mib = sys.argv[1], int(sys.argv[2])
		blobs = os.path.join(out, "blobs", "sha256")
		os.makedirs(blobs, exist_ok=True)
		def put(data=None, path=None):
		    h = hashlib.sha256()
		    if path:
		        with open(path, "rb") as f:
		            while b := f.read(1 << 20):
		                h.update(b)
		        d = h.hexdigest()
		        os.replace(path, os.path.join(blobs, d))
		        return "sha256:" + d, os.path.getsize(os.path.join(blobs, d))
		    d = hashlib.sha256(data).hexdigest()
		    with open(os.path.join(blobs, d), "wb") as f:
		        f.write(data)
		    return "sha256:" + d, len(data)
		layers, diff_ids = [], []
		for i in range(2):
		    tmp = os.path.join(out, "layer.tmp")
		    h = hashlib.sha256()
		    with open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=1, mtime=0) as f:
		        for _ in range(mib):
		            chunk = os.urandom(1 << 20)
		            h.update(chunk)
		            f.write(chunk)
		    diff_ids.append("sha256:" + h.hexdigest())
		    layers.append(put(path=tmp))
		config = json.dumps({"architecture": "amd64", "os": "linux",
		    "rootfs": {"type": "layers", "diff_ids": diff_ids}}).encode()
		cd, cs = put(config)
		manifest = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		    "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cd, "size": cs},
		    "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": d, "size": s}
		               for d, s in layers]}).encode()
		md, ms = put(manifest)
		with open(os.path.join(out, "index.json"), "w") as f:
		    json.dump({"schemaVersion": 2, "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
		        "digest": md, "size": ms, "annotations": {"org.opencontainers.image.ref.name": "bench"}}]}, f)
		with open(os.path.join(out, "oci-layout"), "w") as f:
		    f.write('{"imageLayoutVersion": "1.0.0"}')
		print(sum(s for _, s in layers) + cs + ms)
	PY
}
