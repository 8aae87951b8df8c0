#!/usr/bin/env bash
# One job: install NVIDIA's perf_analyzer into build/perf_analyzer/ so that
# benchmarks/perf_analyzer.sh can run it on this Debian 12 machine.
#
# Why: the real perf-analyzer wheel (PyPI, 2.60.0) is tagged manylinux_2_38 and its
# binary needs GLIBC_2.38 and GLIBCXX_3.4.32; Debian 12 has glibc 2.36 / GCC 12, so
# pip here only offers a 0.1.0 placeholder. We fetch the real wheel for the
# manylinux_2_38 platform, and libc6 + libstdc++6 + libgcc-s1 from Debian 13 (trixie),
# unpacked (not installed) under build/perf_analyzer/. The wrapper starts the binary
# through trixie's dynamic loader with --library-path, so the system's own libc is
# untouched; libssl3 and zlib still come from the system.
#
# The Debian mirror's address is read at run time from this machine's apt
# configuration (the entry for its own release); apt runs with a private sources list,
# state, cache and status under build/perf_analyzer/apt, so the system's apt is untouched.
#
# Idempotent: a second run only checks. --force reinstalls.
# Knobs (environment): PERF_ANALYZER_VERSION (2.60.0), DEBIAN_SUITE (trixie),
#   DEBIAN_MIRROR (override the mirror read from apt's configuration), PYTHON.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="$ROOT/build/perf_analyzer"
VERSION="${PERF_ANALYZER_VERSION:-2.60.0}"
SUITE="${DEBIAN_SUITE:-trixie}"
PACKAGES=(libc6 libstdc++6 libgcc-s1)
STAMP="$DEST/installed.txt"
WANT_STAMP="perf-analyzer $VERSION; debian $SUITE: ${PACKAGES[*]}"

say() { printf 'perf_analyzer_setup: %s\n' "$*"; }
die() { say "error: $*" >&2; exit 1; }

FORCE=0
[[ "${1:-}" == "--force" ]] && FORCE=1

# Does the binary in folder $1 start through that folder's loader? (It prints its
# version on stderr.) Without an argument: through benchmarks/perf_analyzer.sh.
check() {
    local out
    if [[ -n "${1:-}" ]]; then
        out="$("$1/lib/ld-linux-x86-64.so.2" --library-path "$1/lib" "$1/bin/perf_analyzer" --version 2>&1)" || return 1
    else
        out="$("$ROOT/benchmarks/perf_analyzer.sh" --version 2>&1)" || return 1
    fi
    [[ "$out" == *"Perf Analyzer Version"* ]]
}

if [[ $FORCE == 0 && -f "$STAMP" && "$(head -n1 "$STAMP")" == "$WANT_STAMP" ]] && check; then
    say "already installed in build/perf_analyzer ($(head -n1 "$STAMP")); nothing to do (--force to reinstall)"
    exit 0
fi

[[ "$(uname -m)" == x86_64 ]] || die "only x86_64 is handled (the wheel is manylinux_2_38_x86_64)"
for tool in apt-get dpkg-deb; do
    command -v "$tool" >/dev/null || die "$tool not found (this script expects a Debian-like system)"
done

if [[ -n "${PYTHON:-}" ]]; then :
elif [[ -x "$ROOT/.venv/bin/python" ]]; then PYTHON="$ROOT/.venv/bin/python"
else PYTHON=python3
fi

say "installing into build/perf_analyzer (perf-analyzer $VERSION, libraries from Debian $SUITE)"
# Built beside it and swapped in at the end, so a failed run leaves a working install.
FINAL="$DEST"
DEST="$FINAL.partial"
rm -rf "$DEST"
mkdir -p "$DEST"
TMP="$DEST/tmp"
mkdir -p "$TMP"

# --- 1. the wheel ------------------------------------------------------------------
say "downloading the perf-analyzer $VERSION wheel for manylinux_2_38_x86_64 with pip"
"$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: \
    --platform manylinux_2_38_x86_64 "perf-analyzer==$VERSION" -d "$TMP/wheel"
WHEEL="$(ls "$TMP"/wheel/perf_analyzer-"$VERSION"-*manylinux*.whl 2>/dev/null | head -n1 || true)"
[[ -n "$WHEEL" ]] || die "pip did not fetch a manylinux wheel of perf-analyzer $VERSION"
"$PYTHON" -m zipfile -e "$WHEEL" "$TMP/wheel/x"
mkdir -p "$DEST/bin"
mv "$TMP/wheel/x/perf_analyzer/bin/perf_analyzer" "$DEST/bin/perf_analyzer"
chmod +x "$DEST/bin/perf_analyzer"
say "  binary: build/perf_analyzer/bin/perf_analyzer (from $(basename "$WHEEL"))"

# --- 2. the Debian mirror, read from this machine's apt configuration ----------------
if [[ -z "${DEBIAN_MIRROR:-}" ]]; then
    CODENAME="$(. /etc/os-release && echo "${VERSION_CODENAME:-}")"
    [[ -n "$CODENAME" ]] || die "no VERSION_CODENAME in /etc/os-release; set DEBIAN_MIRROR"
    eval "$(apt-config shell SRC_LIST Dir::Etc::sourcelist/f SRC_PARTS Dir::Etc::sourceparts/d)"
    # One-line entries ("deb [opts] URI SUITE COMPONENTS") and deb822 stanzas
    # (Types/URIs/Suites/Enabled); take a "deb" entry whose suite is this machine's
    # own release name exactly, i.e. the main Debian archive.
    DEBIAN_MIRROR="$(
        {
            [[ -f "$SRC_LIST" ]] && awk -v want="$CODENAME" '
                $1 == "deb" { i = 2
                    if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
                    if ($(i+1) == want) { print $i; exit } }' "$SRC_LIST"
            for f in "$SRC_PARTS"*.list; do
                [[ -f "$f" ]] && awk -v want="$CODENAME" '
                    $1 == "deb" { i = 2
                        if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
                        if ($(i+1) == want) { print $i; exit } }' "$f"
            done
            for f in "$SRC_PARTS"*.sources; do
                [[ -f "$f" ]] && awk -v want="$CODENAME" '
                    function flush() {
                        if (types ~ /(^| )deb( |$)/ && enabled !~ /^(no|false)$/ && (" " suites " ") ~ (" " want " "))
                            { split(uris, u, " "); print u[1]; found = 1 }
                        types = uris = suites = enabled = "" }
                    /^[ \t]*#/ { next }
                    /^[ \t]*$/ { flush(); if (found) exit; next }
                    { key = tolower($1); sub(/:$/, "", key); $1 = ""; sub(/^ +/, "")
                      if (key == "types") types = $0; else if (key == "uris") uris = $0
                      else if (key == "suites") suites = $0; else if (key == "enabled") enabled = tolower($0) }
                    END { if (!found) flush() }' "$f"
            done
            true
        } | head -n1 || true
    )"
    [[ -n "$DEBIAN_MIRROR" ]] || die "found no '$CODENAME' entry in apt's sources to take the mirror from; set DEBIAN_MIRROR"
    say "Debian mirror (from this machine's apt sources, entry for '$CODENAME'): $DEBIAN_MIRROR"
else
    say "Debian mirror (from DEBIAN_MIRROR): $DEBIAN_MIRROR"
fi

# --- 3. private apt: index of $SUITE, download the packages --------------------------
APT="$TMP/apt"
mkdir -p "$APT/lists/partial" "$APT/cache/archives/partial" "$APT/sources.list.d" "$APT/preferences.d" "$APT/debs"
: >"$APT/status"
printf 'deb %s %s main\n' "$DEBIAN_MIRROR" "$SUITE" >"$APT/sources.list"
# Read after the system's apt.conf.d (so proxies and the like still apply); everything
# that apt would write, and the list of sources, is redirected here; the system's
# update hooks are cleared.
cat >"$APT/apt.conf" <<EOF
Dir::Etc::sourcelist "$APT/sources.list";
Dir::Etc::sourceparts "$APT/sources.list.d";
Dir::Etc::preferences "$APT/preferences";
Dir::Etc::preferencesparts "$APT/preferences.d";
Dir::State "$APT";
Dir::State::lists "$APT/lists";
Dir::State::status "$APT/status";
Dir::Cache "$APT/cache";
Dir::Cache::archives "$APT/cache/archives";
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
APT::Architecture "amd64";
#clear APT::Architectures;
APT::Architectures { "amd64"; };
Acquire::Languages "none";
#clear APT::Update::Post-Invoke-Success;
#clear APT::Update::Post-Invoke;
#clear DPkg::Post-Invoke;
EOF
say "apt-get update for '$SUITE' with a private state directory (signatures checked with the system's Debian keys)"
apt-get -q --error-on=any -c "$APT/apt.conf" update >"$APT/update.log" 2>&1 || { cat "$APT/update.log" >&2; die "apt-get update failed"; }
say "apt-get download ${PACKAGES[*]}"
(cd "$APT/debs" && apt-get -q -c "$APT/apt.conf" download "${PACKAGES[@]}" >"$APT/download.log" 2>&1) \
    || { cat "$APT/download.log" >&2; die "apt-get download failed"; }

# --- 4. unpack (not install) them ------------------------------------------------------
mkdir -p "$DEST/sysroot"
NEWSTAMP="$DEST/installed.txt.tmp"
{ echo "$WANT_STAMP"; echo "wheel: $(basename "$WHEEL")"; echo "mirror: $DEBIAN_MIRROR $SUITE"; } >"$NEWSTAMP"
for deb in "$APT"/debs/*.deb; do
    dpkg-deb -x "$deb" "$DEST/sysroot"
    echo "deb: $(basename "$deb")" >>"$NEWSTAMP"
    say "  unpacked $(basename "$deb")"
done
LOADER="$(find "$DEST/sysroot" -name 'ld-linux-x86-64.so.2' -path '*x86_64-linux-gnu*' | head -n1 || true)"
[[ -n "$LOADER" ]] || die "no ld-linux-x86-64.so.2 in the unpacked libc6"
LIBDIR="$(dirname "$LOADER")"
[[ -e "$LIBDIR/libc.so.6" && -e "$LIBDIR/libstdc++.so.6" ]] || die "libc.so.6 / libstdc++.so.6 not beside the loader in $LIBDIR"
ln -sfn "${LIBDIR#"$DEST/"}" "$DEST/lib"
say "  loader and libraries: build/perf_analyzer/lib -> ${LIBDIR#"$DEST/"}"
rm -rf "$TMP"

# --- 5. check, swap in ---------------------------------------------------------------
if ! check "$DEST"; then
    "$DEST/lib/ld-linux-x86-64.so.2" --library-path "$DEST/lib" "$DEST/bin/perf_analyzer" --version 2>&1 | tail -n 5 >&2 || true
    die "perf_analyzer does not start through the unpacked loader (left in build/perf_analyzer.partial)"
fi
mv "$DEST/installed.txt.tmp" "$DEST/installed.txt"
rm -rf "$FINAL"
mv "$DEST" "$FINAL"
check || die "benchmarks/perf_analyzer.sh does not start it"
say "done: benchmarks/perf_analyzer.sh runs ($("$ROOT/benchmarks/perf_analyzer.sh" --version 2>&1 | head -n1))"
