#!/bin/sh
# Run every `make run ...` command of the documentation's marked examples on the tiny models, so
# that a documented command that fails fails a test (tests/doc_commands.c; issue 36).
#
#   sh scripts/check_doc_commands.sh [FILE.md ...]     (default: README.md docs/usage.md)
#
# Marked examples: a fenced block right after a line `<!-- doc-commands -->`; its lines that
# start with `make run` are the commands (other lines, e.g. `make test`, are not run). Each is
# run from the repository root as `make pipeline BIN=$BUILD/bin OUT=<a fresh temp dir> ...`
# (`make run` first installs packages and builds with the default compiler: the test suite has
# built the programs already). What cannot run here is mapped, and each mapping is printed:
#   - MODEL=<a path or hub id not on this machine>: a CogVideoX name -> models/cogvideox-tiny-random,
#     a Wan name -> models/wan2.1-tiny-random (their cvx_run_defaults size the video), and
#     STEPS=N -> STEPS=2;
#   - PROMPTS_FILE=<a file not on this machine>: a three-line file with a blank line (prompts on
#     lines 1 and 3).
# Prints one line per command and "doc commands: N run, N failed"; exit 1 if any failed (its
# output is printed) or if no command was found.
BUILD=${BUILD:-build}
[ $# -gt 0 ] || set -- README.md docs/usage.md
tmp=$(mktemp -d /tmp/cvx_doccmd_XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
# the commands, one per line, as FILE:LINE<TAB>command
for f in "$@"; do
    awk -v f="$f" '
        /^<!-- doc-commands -->/ { armed = 1; next }
        /^```/ { if (inblock) { inblock = 0 } else if (armed) { inblock = 1; armed = 0 } ; next }
        inblock && /^make run( |$)/ { printf "%s:%d\t%s\n", f, NR, $0 }' "$f"
done >"$tmp/commands"
n=0; failed=0
printf 'a red fox running through snow\n\na lighthouse at dusk\n' >"$tmp/prompts.txt"
while IFS='	' read -r where cmd; do
    n=$((n + 1))
    out="$tmp/out$n"
    mapped=$cmd note=""
    model=$(printf '%s\n' "$cmd" | sed -n 's/.*MODEL=\([^ ]*\).*/\1/p')
    if [ -n "$model" ] && [ ! -e "$model" ]; then
        case "$model" in
            *[Ww]an*) tiny=models/wan2.1-tiny-random ;;
            *) tiny=models/cogvideox-tiny-random ;;
        esac
        mapped=$(printf '%s\n' "$mapped" | sed "s#MODEL=[^ ]*#MODEL=$tiny#; s#STEPS=[0-9]*#STEPS=2#")
        note=" [MODEL=$model -> $tiny, STEPS -> 2]"
    fi
    pf=$(printf '%s\n' "$cmd" | sed -n 's/.*PROMPTS_FILE=\([^ ]*\).*/\1/p')
    if [ -n "$pf" ] && [ ! -e "$pf" ]; then
        mapped=$(printf '%s\n' "$mapped" | sed "s#PROMPTS_FILE=[^ ]*#PROMPTS_FILE=$tmp/prompts.txt#")
        note="$note [PROMPTS_FILE=$pf -> a 3-line file]"
    fi
    run=$(printf '%s\n' "$mapped" | sed "s#^make run#env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make --no-print-directory pipeline BIN=$BUILD/bin OUT=$out#")
    t0=$(date +%s%3N)
    if sh -c "$run" >"$tmp/log$n" 2>&1 </dev/null; then
        status=ok
    else
        status=FAILED
        failed=$((failed + 1))
    fi
    ms=$(( $(date +%s%3N) - t0 ))
    printf '%-6s %s (%d.%01d s) %s%s\n' "$status" "$where" $((ms / 1000)) $((ms % 1000 / 100)) "$cmd" "$note"
    if [ $status = FAILED ]; then
        echo "  ran: $run"
        tail -n 15 "$tmp/log$n" | sed 's/^/  | /'
    fi
    rm -rf "$out"
done <"$tmp/commands"
echo "doc commands: $n run, $failed failed"
[ "$n" -gt 0 ] && [ "$failed" -eq 0 ]
