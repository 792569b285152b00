#!/bin/sh
# OpenMP wait policy alone and beside CPU hogs (issue 14): a short stage-2 forward (bench_stage2,
# CogVideoX-2b dims, 2 layers, S2ARGS) and a small VAE decode (bench_stage3 S3ARGS) under each
# wait setting, first with the machine as it is, then beside HOGS busy loops (nice 0).
#   sh bench/omp_under_load.sh [BUILD]        (HOGS=2 by default; a few minutes on an idle machine)
# shellcheck disable=SC2086  # S2ARGS/S3ARGS are flag lists: word splitting is intended
set -u
B=${1:-build}
HOGS=${HOGS:-2}
POLICIES=${POLICIES:-"default passive spin10k active"}
S2ARGS=${S2ARGS:-"--frames 2 --height 30 --width 44"}
S3ARGS=${S3ARGS:-"1 8 12"}
run() {   # policy bench-args...
    p=$1; shift
    case $p in
    default) env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT CVX_NO_REEXEC=1 "$@" ;;
    passive) env -u GOMP_SPINCOUNT OMP_WAIT_POLICY=PASSIVE CVX_NO_REEXEC=1 "$@" ;;
    spin10k) env -u OMP_WAIT_POLICY GOMP_SPINCOUNT=10000 CVX_NO_REEXEC=1 "$@" ;;
    active) env -u GOMP_SPINCOUNT OMP_WAIT_POLICY=ACTIVE CVX_NO_REEXEC=1 "$@" ;;
    esac
}
measure() {   # label
    for p in $POLICIES; do
        t0=$(date +%s.%N)
        run "$p" "$B/bench/bench_stage2" --model 2b $S2ARGS --runs 1 >/dev/null 2>&1
        t1=$(date +%s.%N)
        run "$p" "$B/bench/bench_stage3" $S3ARGS >/dev/null 2>&1
        t2=$(date +%s.%N)
        printf '%-8s %-8s stage2 %6.1f s   stage3 %6.1f s   load %s\n' "$1" "$p" \
            "$(echo "$t1 - $t0" | bc)" "$(echo "$t2 - $t1" | bc)" "$(cut -d' ' -f1 /proc/loadavg)"
    done
}
measure alone
pids=""
i=0
while [ $i -lt "$HOGS" ]; do
    sh -c 'while :; do :; done' &
    pids="$pids $!"
    i=$((i + 1))
done
measure "+${HOGS}hogs"
for p in $pids; do kill "$p"; done
