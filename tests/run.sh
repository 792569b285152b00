#!/bin/sh
# Run test binaries from the repository root, then print one closing line:
# "N passed, N failed" counting cmocka tests across all binaries. Each binary's wall time is
# printed after its output, and the slowest five before the closing line (the suite's CI budget
# is ~15 min; this is where it goes).
passed=0; failed=0; bad_bins=""; times=""
now_ms() { date +%s%3N; }
for t in "$@"; do
    t0=$(now_ms)
    out=$("$t" 2>&1); rc=$?
    ms=$(( $(now_ms) - t0 ))
    printf '%s\n' "$out"
    printf '== %s: %d.%02d s\n' "$(basename "$t")" $((ms / 1000)) $((ms % 1000 / 10))
    times="$times$ms $(basename "$t")
"
    p=$(printf '%s\n' "$out" | sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' | tail -n 1)
    f=$(printf '%s\n' "$out" | sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' | tail -n 1)
    passed=$((passed + ${p:-0})); failed=$((failed + ${f:-0}))
    if [ $rc -ne 0 ]; then
        bad_bins="$bad_bins $(basename "$t")"
        [ -z "$f" ] && failed=$((failed + 1))
    fi
done
printf '%s' "$times" | sort -rn | head -n 5 | awk '{ printf "slowest: %-28s %4d.%02d s\n", $2, int($1 / 1000), int($1 % 1000 / 10) }'
[ -n "$bad_bins" ] && echo "failing test programs:$bad_bins"
echo "$passed passed, $failed failed"
[ -z "$bad_bins" ]
