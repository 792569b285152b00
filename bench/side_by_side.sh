#!/bin/sh
# Side-by-side benchmark: our stages and upstream PyTorch (../shared/peer) at the same real
# CogVideoX dimensions, measured in ONE run on this machine, in f32 and bf16. Prints a table of
# seconds and ratios. No reference time is hard-coded anywhere: if the peer is not set up, only
# our numbers are printed and the script says so.
#
#   sh bench/side_by_side.sh [CASES]      CASES: comma list of t5,tr2b,tr5b,vae (default all)
#   (make bench PART=t5,vae runs the same; Ctrl-C or SIGTERM stop it and its benchmark at once)
#   Wan 2.1 cases (wan13, wan14, wanvae, umt5; "wan" = all four; wangguf) go to bench/side_by_side_wan.sh,
#   which also runs stable-diffusion.cpp beside them.
#   env: BUILD (build dir, default build), PEER_DIR (default ../shared/peer), THREADS (2),
#        PRECISIONS ("f32 bf16")
#
# Each of our bench programs prints one machine-readable line per measurement:
#   RESULT case=<t5|tr2b|tr5b|vae> precision=<f32|bf16> seconds=<median wall s> gflops=<rate>
set -u
BUILD=${BUILD:-build}
PEER_DIR=${PEER_DIR:-../shared/peer}
THREADS=${THREADS:-2}
PRECISIONS=${PRECISIONS:-"f32 bf16"}
CASES=${1:-t5,tr2b,tr5b,vae}
wan=$(echo "$CASES" | tr ',' '\n' | grep -xE 'wan|wan13|wan14|wanvae|umt5|wangguf' | paste -sd, -)
if [ -n "$wan" ]; then
    case ",$wan," in *,wan,*) wan=wan;; esac
    BUILD=$BUILD THREADS=$THREADS PRECISIONS=$PRECISIONS PEER_DIR=$PEER_DIR sh "$(dirname "$0")/side_by_side_wan.sh" "$wan" || exit $?
    CASES=$(echo "$CASES" | tr ',' '\n' | grep -vxE 'wan|wan13|wan14|wanvae|umt5|wangguf' | paste -sd, -)
    [ -n "$CASES" ] || exit 0
fi
for c in $(echo "$CASES" | tr ',' ' '); do
    case $c in t5|tr2b|tr5b|vae) ;; *) echo "side_by_side.sh: unknown case '$c' (t5, tr2b, tr5b, vae, wan, wan13, wan14, wanvae, umt5, wangguf)" >&2; exit 2;; esac
done
out=$(mktemp -d)
. "$(dirname "$0")"/fresh_bins.sh
fresh_bins side_by_side.sh "$(dirname "$0")/.." bench_stage1 bench_stage2 bench_stage3
# Ctrl-C / SIGTERM stop the run at once (the trap used to swallow the first SIGTERM, and the
# benchmark in the foreground ran on): each measurement runs in the background in a process
# group of its own (setsid: a background child of a non-interactive shell is no group leader,
# so it does not fork and $! is the group), `wait` returns at the signal, and the trap stops the
# whole group.
job=
stop() { if [ -n "$job" ]; then kill -TERM -"$job" "$job" 2>/dev/null; fi; rm -rf "$out"; }
trap 'stop' EXIT
trap 'echo "side_by_side.sh: interrupted" >&2; stop; trap - EXIT; exit 130' INT
trap 'echo "side_by_side.sh: terminated" >&2; stop; trap - EXIT; exit 143' TERM HUP
spawn() {   # command...: in the background, its own process group; sets job
    setsid "$@" &
    job=$!
}
finish() {   # waits for the job; its exit status
    wait "$job"
    rc=$?
    job=
    return $rc
}
run() {   # bench-program args...: output shown and appended to ours.txt
    spawn sh -c '"$@" | tee -a "$0"' "$out/ours.txt" "$@"
    finish
}

has() { case ",$CASES," in *",$1,"*) return 0;; esac; return 1; }

# ---- ours ------------------------------------------------------------------------------
for p in $PRECISIONS; do
    has t5   && run "$BUILD/bench/bench_stage1" --threads "$THREADS" --precision "$p"
    has tr2b && run "$BUILD/bench/bench_stage2" --model 2b --threads "$THREADS" --precision "$p"
    has tr5b && run "$BUILD/bench/bench_stage2" --model 5b --threads "$THREADS" --precision "$p"
    has vae  && run "$BUILD/bench/bench_stage3" --threads "$THREADS" --precision "$p"
done
touch "$out/ours.txt"

# ---- the peer ----------------------------------------------------------------------------
peer_ok=0
if [ -f "$PEER_DIR/peer_bf16.py" ] && [ -d "${REFSRC:-$PEER_DIR/refsrc}" ] && \
   /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    peer_ok=1
    for p in $PRECISIONS; do
        echo "== PyTorch peer ($p): /usr/bin/python3 $PEER_DIR/peer_bf16.py --only $CASES --dtype $p"
        spawn sh -c 'cd "$0" && OMP_NUM_THREADS=$1 exec /usr/bin/python3 peer_bf16.py --only "$2" --dtype "$3"' \
            "$PEER_DIR" "$THREADS" "$CASES" "$p" > "$out/peer_$p.json" 2> "$out/peer_$p.log"
        finish || { echo "peer ($p) failed:"; tail -5 "$out/peer_$p.log"; }
    done
else
    echo "note: the PyTorch peer is not set up (see $PEER_DIR/README.md): printing our numbers only"
fi

# ---- the table ---------------------------------------------------------------------------
/usr/bin/python3 - "$out" "$peer_ok" "$PRECISIONS" <<'PY'
import json, os, re, sys
out, peer_ok, precs = sys.argv[1], sys.argv[2] == "1", sys.argv[3].split()
ours = {}
for line in open(os.path.join(out, "ours.txt")):
    if line.startswith("RESULT "):
        kv = dict(x.split("=", 1) for x in line.split()[1:])
        ours[(kv["case"], kv["precision"])] = (float(kv["seconds"]), float(kv.get("gflops", "nan")))
peer = {}
for p in precs:
    f = os.path.join(out, f"peer_{p}.json")
    if peer_ok and os.path.exists(f) and os.path.getsize(f):
        try:
            for k, v in json.load(open(f)).items():
                peer[(k, p)] = v["median_s"]
        except ValueError:
            pass
names = {"t5": "T5-XXL dims, 2 layers", "tr2b": "CogVideoX-2b dims, 2 layers", "tr5b": "CogVideoX-5b dims, 2 layers",
         "vae": "VAE decoder, latent 3x30x45"}
print()
print("| case | PyTorch f32 | PyTorch bf16 | ours f32 | ours bf16 | ours f32 / PyTorch f32 | ours bf16 / PyTorch bf16 |")
print("| --- | --- | --- | --- | --- | --- | --- |")
def s(x): return f"{x:.2f} s" if x is not None else "—"
def r(a, b): return f"{b / a:.2f}×" if a is not None and b is not None else "—"
for c in ("t5", "tr2b", "tr5b", "vae"):
    if not any(k[0] == c for k in ours): continue
    of, ob = (ours.get((c, p), (None,))[0] for p in ("f32", "bf16"))
    pf, pb = peer.get((c, "f32")), peer.get((c, "bf16"))
    print(f"| {names[c]} | {s(pf)} | {s(pb)} | {s(of)} | {s(ob)} | {r(of, pf)} | {r(ob, pb)} |")
print("(ratios > 1: ours is faster; all numbers from this one run)")
PY
