#!/usr/bin/env bash
# One job: run NVIDIA's perf_analyzer with all arguments passed through, e.g.
#   benchmarks/perf_analyzer.sh -m minilm -u localhost:50051 -i grpc --concurrency-range 1:32:2
#
# Why: its binary (perf-analyzer 2.60.0, manylinux_2_38) needs glibc 2.38 and
# GLIBCXX_3.4.32, newer than this Debian 12 system's. benchmarks/perf_analyzer_setup.sh
# unpacks Debian 13's libc6/libstdc++6 under build/perf_analyzer/; here the binary is
# started through that folder's dynamic loader with --library-path pointing at it
# (libraries not found there, e.g. libssl3 and zlib, come from the system as usual).
set -euo pipefail

DEST="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/build/perf_analyzer"
if [[ ! -x "$DEST/lib/ld-linux-x86-64.so.2" || ! -f "$DEST/bin/perf_analyzer" ]]; then
    echo "perf_analyzer.sh: not installed; run benchmarks/perf_analyzer_setup.sh first" >&2
    exit 2
fi
run() {
    "$DEST/lib/ld-linux-x86-64.so.2" --library-path "$DEST/lib" --argv0 perf_analyzer \
        "$DEST/bin/perf_analyzer" "$@"
}
# perf_analyzer itself has no --help: it prints its usage (to stderr, exit 99) when
# started with no arguments and rejects -h/--help. Give -h/--help that usage, exit 0.
if [[ $# -eq 1 && ( "$1" == --help || "$1" == -h ) ]]; then
    run 2>&1 || true
    exit 0
fi
exec "$DEST/lib/ld-linux-x86-64.so.2" --library-path "$DEST/lib" --argv0 perf_analyzer \
    "$DEST/bin/perf_analyzer" "$@"
