#!/bin/sh
# Build the libFuzzer targets in fuzz/ (clang, -fsanitize=fuzzer,address,undefined) against the
# parser sources of common/, replay the committed seeds and crash regressions, then fuzz each
# target for FUZZ_SECONDS (default 60). Exits non-zero if any target crashes, leaks, hits UB or
# times out; the crashing input is saved in $FUZZ_BUILD/artifacts/.
#
#   FUZZ_SECONDS=600 sh scripts/fuzz.sh            # longer run
#   FUZZ_TARGETS="config" sh scripts/fuzz.sh       # a subset (safetensors config index genconfig checkpoint genvalidate prompt_clean gguf bpe)
#   FUZZ_PARALLEL=1 sh scripts/fuzz.sh             # the targets at the same time, one core each
#   FUZZ_SECONDS=0 sh scripts/fuzz.sh              # build and replay the corpus only
#   FUZZ_RUNS=10000000 sh scripts/fuzz.sh          # each target until 10 M executions (the long run)
#   FUZZ_MAX_LEN=1024 ...                          # largest input libFuzzer makes (default 16384)
#   FUZZ_TIMEOUT=600 ...                           # per-input timeout (default 10 s); a niced run
#                                                  # on a loaded machine can stall > 10 s
# shellcheck disable=SC2086  # word splitting of flag lists is intended
set -eu
cd "$(dirname "$0")/.."

FUZZ_SECONDS=${FUZZ_SECONDS:-60}
FUZZ_RUNS=${FUZZ_RUNS:-}           # stop each target after this many executions instead (long runs)
FUZZ_TARGETS=${FUZZ_TARGETS:-"safetensors config index genconfig checkpoint genvalidate prompt_clean gguf bpe"}
FUZZ_PARALLEL=${FUZZ_PARALLEL:-0}
FUZZ_MAX_LEN=${FUZZ_MAX_LEN:-16384}
FUZZ_TIMEOUT=${FUZZ_TIMEOUT:-10}   # seconds per input; raise it for long niced runs on a busy machine
FUZZ_BUILD=${FUZZ_BUILD:-build-fuzz}
CLANG=${CLANG:-clang}
# The untrusted-input parsers and what they need; nothing here touches BLAS, OpenMP or FFmpeg.
COMMON_SRC="error dtype fileio safetensors st_writer weights config rng validate quant quant_k quant_avx2 gguf"
# The prompt cleaning and the BPE tokenizer (untrusted text: the user's prompt; tokenizer files),
# linked into fuzz_prompt_clean and fuzz_bpe only, with ICU.
TEXT_SRC="pystr html_unescape ftfy ftfy_tables prompt_clean bpe"

# ---- toolchain: clang with the libFuzzer runtime, and json-c (Debian packages only) ----
fuzzer_works() {
    command -v "$CLANG" >/dev/null 2>&1 || return 1
    t=$(mktemp -d)
    printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }\n' >"$t/t.c"
    "$CLANG" -fsanitize=fuzzer,address,undefined "$t/t.c" -o "$t/t" >/dev/null 2>&1
    rc=$?
    rm -rf "$t"
    return $rc
}
apt_install() {
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    echo "fuzz: installing $*"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$@"
}
if ! fuzzer_works; then
    # libFuzzer and the sanitizer runtimes live in libclang-rt-dev (not pulled in without
    # recommends); clang alone cannot link -fsanitize=fuzzer.
    apt_install clang libclang-rt-dev
    fuzzer_works || { echo "fuzz: $CLANG cannot build -fsanitize=fuzzer binaries" >&2; exit 1; }
fi
if ! pkg-config --exists json-c 2>/dev/null; then
    apt_install pkg-config libjson-c-dev
fi
if ! pkg-config --exists icu-uc 2>/dev/null; then
    apt_install pkg-config libicu-dev
fi

# ---- build ----
SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
CFLAGS="-std=gnu11 -g -O1 -Wall -Wextra -Wno-unused-parameter -Icommon -I. $(pkg-config --cflags json-c) $SAN"
LIBS="$(pkg-config --libs json-c) -lm"
mkdir -p "$FUZZ_BUILD/obj" "$FUZZ_BUILD/artifacts"
OBJS=""
for s in $COMMON_SRC; do
    o="$FUZZ_BUILD/obj/$s.o"
    if [ ! -f "$o" ] || [ -n "$(find common -maxdepth 1 \( -name "$s.c" -o -name '*.h' \) -newer "$o" | head -1)" ]; then
        echo "fuzz: cc common/$s.c"
        "$CLANG" $CFLAGS -fsanitize=fuzzer-no-link -c "common/$s.c" -o "$o"
    fi
    OBJS="$OBJS $o"
done
TEXT_OBJS=""
for s in $TEXT_SRC; do
    o="$FUZZ_BUILD/obj/stage1_$s.o"
    if [ ! -f "$o" ] || [ -n "$(find stage1 common -maxdepth 1 \( -name "$s.c" -o -name '*.h' \) -newer "$o" | head -1)" ]; then
        echo "fuzz: cc stage1/$s.c"
        "$CLANG" $CFLAGS -fsanitize=fuzzer-no-link -c "stage1/$s.c" -o "$o"
    fi
    TEXT_OBJS="$TEXT_OBJS $o"
done
for t in $FUZZ_TARGETS; do
    echo "fuzz: link $FUZZ_BUILD/fuzz_$t"
    extra=""
    case "$t" in prompt_clean|bpe) extra="$TEXT_OBJS $(pkg-config --libs icu-uc)" ;; esac
    "$CLANG" $CFLAGS -fsanitize=fuzzer "fuzz/fuzz_$t.c" $OBJS $extra $LIBS -o "$FUZZ_BUILD/fuzz_$t"
done

# The index target writes its input to a file every execution: on a disk-backed /tmp that is
# mostly kernel time (measured 663 vs ~6,000 exec/s on tmpfs beside other load), so its temp
# directory goes to /dev/shm when that is a writable tmpfs and TMPDIR is not set.
# Each run gets its own directory there, removed at the end (libFuzzer leaves through _exit, so a
# target's own clean-up does not run when its time is up).
if [ -z "${TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ]; then
    TMPDIR=$(mktemp -d /dev/shm/cvx_fuzz_run.XXXXXX)
    export TMPDIR
    trap 'rm -rf "$TMPDIR"' EXIT
fi
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

# ---- replay: seeds and past crashes must all pass ----
failed=""
for t in $FUZZ_TARGETS; do
    files=$(find "fuzz/corpus/$t" "fuzz/regressions/$t" -type f 2>/dev/null | sort)
    [ -n "$files" ] || continue
    n=$(echo "$files" | wc -l)
    if "$FUZZ_BUILD/fuzz_$t" -runs=1 $files >"$FUZZ_BUILD/replay_$t.log" 2>&1; then
        echo "fuzz: $t: replayed $n seed/regression inputs: ok"
    else
        echo "fuzz: $t: REPLAY FAILED (see $FUZZ_BUILD/replay_$t.log)" >&2
        tail -30 "$FUZZ_BUILD/replay_$t.log" >&2
        failed="$failed $t"
    fi
done

# ---- fuzz ----
run_target() {
    t=$1
    mkdir -p "$FUZZ_BUILD/corpus/$t"   # new inputs found go here; fuzz/corpus/$t is read-only seeds
    dict=""
    [ -f "fuzz/$t.dict" ] && dict="-dict=fuzz/$t.dict"
    limit="-max_total_time=$FUZZ_SECONDS"
    [ -n "$FUZZ_RUNS" ] && limit="-runs=$FUZZ_RUNS"
    "$FUZZ_BUILD/fuzz_$t" $dict $limit -timeout="$FUZZ_TIMEOUT" -rss_limit_mb=2048 \
        -max_len="$FUZZ_MAX_LEN" -print_final_stats=1 -artifact_prefix="$FUZZ_BUILD/artifacts/$t-" \
        "$FUZZ_BUILD/corpus/$t" "fuzz/corpus/$t" >"$FUZZ_BUILD/fuzz_$t.log" 2>&1
}
summary() {
    t=$1 rc=$2
    stats=$(grep -E '^#[0-9]+.*(DONE|pulse|NEW|REDUCE)' "$FUZZ_BUILD/fuzz_$t.log" | tail -1 | sed 's/^#\([0-9]*\)[[:space:]]*[A-Z]*[[:space:]]*/execs \1, /')
    if [ "$rc" -eq 0 ]; then
        echo "fuzz: $t: ${FUZZ_SECONDS}s clean: $stats"
    else
        echo "fuzz: $t: FAILED (exit $rc) after: $stats; log $FUZZ_BUILD/fuzz_$t.log" >&2
        grep -E 'ERROR|SUMMARY|runtime error|Test unit written' "$FUZZ_BUILD/fuzz_$t.log" | head -8 >&2
        failed="$failed $t"
    fi
}
if [ "$FUZZ_SECONDS" -gt 0 ]; then
    if [ "$FUZZ_PARALLEL" = 1 ]; then
        pids=""
        for t in $FUZZ_TARGETS; do
            echo "fuzz: $t: running ${FUZZ_SECONDS}s (in parallel)"
            run_target "$t" &
            pids="$pids $t:$!"
        done
        for p in $pids; do
            rc=0
            wait "${p#*:}" || rc=$?
            summary "${p%%:*}" $rc
        done
    else
        for t in $FUZZ_TARGETS; do
            echo "fuzz: $t: running ${FUZZ_SECONDS}s"
            rc=0
            run_target "$t" || rc=$?
            summary "$t" $rc
        done
    fi
fi

if [ -n "$failed" ]; then
    echo "fuzz: FAILED: $(echo $failed | tr ' ' '\n' | sort -u | tr '\n' ' ')" >&2
    exit 1
fi
echo "fuzz: all targets clean"
