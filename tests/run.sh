#!/bin/sh
# Run test binaries from the repository root, TEST_JOBS at a time (default: the number of CPUs;
# each binary's output is printed whole, in the order given), then print one closing line:
# "N passed, N failed" counting cmocka tests across all binaries. Each binary's wall time is
# printed after its output, and the slowest five before the closing line (the suite's CI budget
# is ~15 min; this is where it goes).
#
# Many tests mostly wait on the programs they start (process start-up, file I/O), so two at a
# time on 2 cores fills the CPU. Waiting OpenMP threads sleep after a short spin
# (GOMP_SPINCOUNT, as the programs set for themselves, common/runenv.h) so that tests sharing the
# cores do not steal each other's time; a test that sets its own environment still wins.
jobs=${TEST_JOBS:-$(nproc 2>/dev/null || echo 1)}
export GOMP_SPINCOUNT=${GOMP_SPINCOUNT:-10000}
dir=$(mktemp -d /tmp/cvx_testrun_XXXXXX) || exit 1
trap 'rm -rf "$dir"' EXIT INT TERM
# each binary: its output, exit status and wall time in $dir/<index>.{out,rc,ms}, $jobs at a time
i=0
for t in "$@"; do i=$((i + 1)); printf '%s\n%s\n' "$i" "$t"; done |
    CVX_RUN_DIR=$dir xargs -d '\n' -n 2 -P "$jobs" sh -c '
        t0=$(date +%s%3N)
        "$1" >"$CVX_RUN_DIR/$0.out" 2>&1
        echo $? >"$CVX_RUN_DIR/$0.rc"
        echo $(( $(date +%s%3N) - t0 )) >"$CVX_RUN_DIR/$0.ms"'
passed=0; failed=0; bad_bins=""; times=""; i=0
for t in "$@"; do
    i=$((i + 1))
    cat "$dir/$i.out"
    rc=$(cat "$dir/$i.rc"); ms=$(cat "$dir/$i.ms")
    printf '== %s: %d.%02d s\n' "$(basename "$t")" $((ms / 1000)) $((ms % 1000 / 10))
    times="$times$ms $(basename "$t")
"
    p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$dir/$i.out" | tail -n 1)
    f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$dir/$i.out" | tail -n 1)
    passed=$((passed + ${p:-0})); failed=$((failed + ${f:-0}))
    if [ "$rc" -ne 0 ]; then
        bad_bins="$bad_bins $(basename "$t")"
        [ -z "$f" ] && failed=$((failed + 1))
    fi
done
printf '%s' "$times" | sort -rn | head -n 5 | awk '{ printf "slowest: %-28s %4d.%02d s\n", $2, int($1 / 1000), int($1 % 1000 / 10) }'
[ -n "$bad_bins" ] && echo "failing test programs:$bad_bins"
echo "$passed passed, $failed failed"
[ -z "$bad_bins" ]
