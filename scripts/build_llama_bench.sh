#!/usr/bin/env bash
# Build llama.cpp's `llama-bench` from the llama-cpp-python source distribution that `speed` benchmarks through
# its Python binding: the same vendored llama.cpp, built with its tools on, so `speed --methods ...,llama-bench`
# compares the binding against llama.cpp's own binary on the same source.
#
#   bash scripts/build_llama_bench.sh                     # into build/llamacpp, all cores
#   bash scripts/build_llama_bench.sh --dir /work/build/llamacpp --jobs 2
#   bash scripts/build_llama_bench.sh --dry-run           # print the steps, run none
#
# Steps (each skipped where its result is already there, so a rerun after an interruption resumes):
#   1. pip download --no-binary :all: --no-deps llama-cpp-python==VERSION  (the .tar.gz, into DIR)
#   2. untar it: DIR/llama_cpp_python-VERSION/vendor/llama.cpp
#   3. cmake -B build -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_BUILD_SERVER=OFF (GGML_NATIVE: this CPU)
#   4. cmake --build build --target llama-bench -j JOBS  (15+ minutes on two busy cores)
# The last line printed is the binary's path: give it to `speed --llama-bench`, or export
# SPECSTREAM_LLAMA_BENCH=<path>. Settings: --dir (default build/llamacpp), --version (default 0.3.36, the
# binding's pinned version in requirements-bench.txt), --jobs (default: nproc), PY (a python with pip).
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=build/llamacpp
VERSION=0.3.36
JOBS="$(nproc 2>/dev/null || echo 2)"
DRY=0
PY="${PY:-.venv/bin/python}"
usage() { sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) DIR="${2:?--dir needs a folder}"; shift 2 ;;
    --version) VERSION="${2:?--version needs a version}"; shift 2 ;;
    --jobs) JOBS="${2:?--jobs needs a count}"; shift 2 ;;
    --dry-run) DRY=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "build_llama_bench.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
if ! [[ "$JOBS" =~ ^[1-9][0-9]*$ ]]; then echo "build_llama_bench.sh: --jobs must be a positive count, got '$JOBS'" >&2; exit 2; fi
if ! [[ "$VERSION" =~ ^[0-9]+(\.[0-9]+)*$ ]]; then echo "build_llama_bench.sh: --version must look like 0.3.36, got '$VERSION'" >&2; exit 2; fi

TARBALL="$DIR/llama_cpp_python-$VERSION.tar.gz"
SRC="$DIR/llama_cpp_python-$VERSION/vendor/llama.cpp"
BIN="$SRC/build/bin/llama-bench"
step() { echo "+ $*"; if [ "$DRY" = 0 ]; then "$@"; fi; }

if [ "$DRY" = 0 ]; then mkdir -p "$DIR"; fi
if [ ! -f "$TARBALL" ] && [ ! -d "$SRC" ]; then
  step "$PY" -m pip download --no-binary :all: --no-deps "llama-cpp-python==$VERSION" -d "$DIR"
fi
if [ ! -f "$SRC/CMakeLists.txt" ]; then
  step tar -xzf "$TARBALL" -C "$DIR"
fi
if [ ! -f "$SRC/build/CMakeCache.txt" ]; then
  step cmake -S "$SRC" -B "$SRC/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_BUILD_SERVER=OFF
fi
step cmake --build "$SRC/build" --target llama-bench -j "$JOBS"
if [ "$DRY" = 0 ] && [ ! -x "$BIN" ]; then echo "build_llama_bench.sh: no binary at $BIN after the build" >&2; exit 1; fi
realpath -m "$BIN"
