#!/bin/sh
# Run test binaries from the repository root, then print one closing line:
# "N passed, N failed" counting cmocka tests across all binaries.
passed=0; failed=0; bad_bins=""
for t in "$@"; do
    out=$("$t" 2>&1); rc=$?
    printf '%s\n' "$out"
    p=$(printf '%s\n' "$out" | sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' | tail -n 1)
    f=$(printf '%s\n' "$out" | sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' | tail -n 1)
    passed=$((passed + ${p:-0})); failed=$((failed + ${f:-0}))
    if [ $rc -ne 0 ]; then
        bad_bins="$bad_bins $(basename "$t")"
        [ -z "$f" ] && failed=$((failed + 1))
    fi
done
[ -n "$bad_bins" ] && echo "failing test programs:$bad_bins"
echo "$passed passed, $failed failed"
[ -z "$bad_bins" ]
