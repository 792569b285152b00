# Sourced by the side-by-side scripts: refuse to time a bench program older than its sources (a stale
# build/bench binary would time old code; `make bench` rebuilds them, running a script directly does not).
#   fresh_bins SCRIPT_NAME REPO_ROOT PROGRAM...   (BUILD: the build directory, as the scripts take it)
fresh_bins() {
    name=$1 root=$2
    shift 2
    for b; do
        bin=$BUILD/bench/$b
        case $bin in /*) ;; *) bin=$PWD/$bin;; esac
        [ -x "$bin" ] || continue   # a case whose program is missing fails when it runs
        newer=$(cd "$root" && find common stage1 stage2 stage3 pipeline bench -name '*.[ch]' -newer "$bin" | head -1)
        [ -z "$newer" ] || { echo "$name: $BUILD/bench/$b is older than $newer: run make bench (or make $BUILD/bench/$b) first" >&2; exit 1; }
    done
}
