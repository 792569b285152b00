#!/bin/sh
# Side-by-side Wan 2.1 benchmark (issue 20): our stages, the PyTorch peer (diffusers >= 0.33 on
# torch, ../shared/peer) and stable-diffusion.cpp (bench/peers/sdcpp), at the same real Wan
# dimensions with random weights, measured in ONE run on this machine, alternated case by case
# (ours, PyTorch, sd.cpp). Prints a table of seconds and ratios and our rates against the peaks
# bench_kernels measures first. Nothing is hard-coded: a peer that is not set up is left out.
#
#   sh bench/side_by_side_wan.sh [CASES]   CASES: comma list of wan13,wan14,wanvae,umt5 (default all;
#                                          "wan" = all). make bench PART=wan runs the same.
#   wan13 / wan14  one CFG step (2 forwards of batch 1) of the transformer at the Wan2.1-T2V-1.3B /
#                  -14B widths, LAYERS layers, text 512, at each of FRAMES frames of 480x832
#                  (33 frames = 14,040 tokens, 81 = 32,760)
#   wanvae         the Wan 2.1 VAE decoding a latent VAE_LATENT (F,h,w: default 3,30,52 -> 9 frames
#                  240x416; sd.cpp's untiled decode needs ~17 GB at 480x832)
#   umt5           UMT5-XXL dims, LAYERS layers: the prompt and the negative prompt, 512 tokens
#                  (ours also at UMT5_SEQ_LEN real tokens: it runs only the prompt's length)
#   wangguf        quantized weights (issue 24): a random 2-layer checkpoint at the GGUF_MODEL widths
#                  (wan1.3b or wan14b) made into Q8_0 and Q4_K_M GGUFs by our city96 rules
#                  (bench_quant --dir), then one CFG step at GGUF_FRAMES frames of 480x832 (default 9 =
#                  4,680 tokens), ours (bench_quant: bf16 weights, both GGUFs on the dequantized-tile
#                  and the int8 path; compute GGUF_PRECISION, default auto: bf16 where the CPU has
#                  bf16 units, else f32) and stable-diffusion.cpp on the SAME two files, GGUF_ROUNDS
#                  rounds alternated. (sd.cpp takes the widths from the block count, 30 or 40, and
#                  aborts on any other: for these 2-block files its src/model/diffusion/wan.hpp
#                  WanRunner test reads `num_layers == 30 || (num_layers == 2 && !getenv("SD_WAN2_AS_14B"))`
#                  and `num_layers == 40 || (num_layers == 2 && getenv("SD_WAN2_AS_14B"))`, nothing
#                  else changed; the script sets SD_WAN2_AS_14B=1 for wan14b.)
# env: BUILD (build), THREADS (2), PRECISIONS ("f32 bf16"), LAYERS (2), FRAMES ("33 81"),
#      VAE_LATENT (3,30,52), UMT5_SEQ_LEN (100), RUNS (1: steps timed per measurement; the
#      transformer cases take minutes each), PEER_DIR (../shared/peer), REFSRC (the peer's
#      diffusers >= 0.33 tree, default PEER_DIR/refsrc), PEER_SKIP (e.g. "wan14:81:f32": case:frames:
#      precision combinations the PyTorch peer skips), SDCPP (sd-cli built by
#      bench/peers/sdcpp/setup_sdcpp.sh) and SDCPP_MODELS (its make_wan_random.py files, made with
#      --dit-layers LAYERS --t5-layers LAYERS): sd.cpp runs f16 weights with --diffusion-fa, 1 Euler
#      step with CFG, stopped once sampling is done (DiT cases); its UMT5 row is the text encoding
#      of the VAE case's run.
set -u
BUILD=${BUILD:-build}
THREADS=${THREADS:-2}
PRECISIONS=${PRECISIONS:-"f32 bf16"}
LAYERS=${LAYERS:-2}
FRAMES=${FRAMES:-"33 81"}
VAE_LATENT=${VAE_LATENT:-3,30,52}
UMT5_SEQ_LEN=${UMT5_SEQ_LEN:-100}
RUNS=${RUNS:-1}
PEER_DIR=${PEER_DIR:-../shared/peer}
PEER_SKIP=${PEER_SKIP:-}
SDCPP=${SDCPP:-}
SDCPP_MODELS=${SDCPP_MODELS:-}
GGUF_MODEL=${GGUF_MODEL:-wan1.3b}
GGUF_FRAMES=${GGUF_FRAMES:-9}
GGUF_ROUNDS=${GGUF_ROUNDS:-2}
GGUF_PRECISION=${GGUF_PRECISION:-auto}
CASES=${1:-wan13,wan14,wanvae,umt5}
[ "$CASES" = wan ] && CASES=wan13,wan14,wanvae,umt5
for c in $(echo "$CASES" | tr ',' ' '); do
    case $c in wan13|wan14|wanvae|umt5|wangguf) ;;
    *) echo "side_by_side_wan.sh: unknown case '$c' (wan13, wan14, wanvae, umt5, wangguf)" >&2; exit 2;; esac
done
case $GGUF_MODEL in wan1.3b|wan14b) ;; *) echo "side_by_side_wan.sh: GGUF_MODEL '$GGUF_MODEL': wan1.3b or wan14b" >&2; exit 2;; esac
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp -d)
. "$here"/fresh_bins.sh
fresh_bins side_by_side_wan.sh "$here/.." bench_kernels bench_wan_stage2 bench_wan_vae bench_stage1 bench_quant
trap 'rm -rf "$out"' EXIT
trap 'echo "side_by_side_wan.sh: interrupted" >&2; exit 130' INT TERM
has() { case ",$CASES," in *",$1,"*) return 0;; esac; return 1; }
R="$out/results.txt"
touch "$R"
note() { echo "== $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg): $*"; }

# ---- the peers that are set up --------------------------------------------------------------
peer_ok=0
if [ -f "$PEER_DIR/refenv.py" ] && [ -d "${REFSRC:-$PEER_DIR/refsrc}/diffusers" ] && \
   REFSRC=${REFSRC:-$PEER_DIR/refsrc} /usr/bin/python3 -c "import sys; sys.path.insert(0, '$PEER_DIR'); import refenv; from diffusers import WanTransformer3DModel" 2>/dev/null; then
    peer_ok=1
else
    echo "note: the PyTorch peer with Wan (diffusers >= 0.33; ../shared/peer/README.md) is not set up: left out"
fi
sd_ok=0
if [ -n "$SDCPP" ] && [ -x "$SDCPP" ] && [ -f "$SDCPP_MODELS/umt5_xxl_fp16.safetensors" ] && \
   [ -f "$SDCPP_MODELS/wan_2.1_vae.safetensors" ]; then
    sd_ok=1
    if has wan13 && [ ! -f "$SDCPP_MODELS/wan2.1_t2v_1.3B_fp16.safetensors" ]; then
        echo "note: no $SDCPP_MODELS/wan2.1_t2v_1.3B_fp16.safetensors (make_wan_random.py --only dit): sd.cpp left out of wan13"
    fi
else
    echo "note: stable-diffusion.cpp is not set up (SDCPP, SDCPP_MODELS; bench/peers/sdcpp/README.md): left out"
fi

# PyTorch peer: one case at one size and precision; its JSON into results as RESULT lines
peer() {   # case precision [frames]
    [ $peer_ok = 1 ] || return 0
    case " $PEER_SKIP " in *" $1:${3:-0}:$2 "*) echo "(PyTorch $1 ${3:-} $2 skipped: PEER_SKIP)"; return 0;; esac
    note "PyTorch $1 $2 ${3:+$3 frames}"
    REFSRC=${REFSRC:-$PEER_DIR/refsrc} OMP_NUM_THREADS=$THREADS /usr/bin/python3 "$here/pt_wan_peer.py" --only "$1" \
        --dtype "$2" --frames "${3:-81}" --layers "$LAYERS" --threads "$THREADS" --vae-latent "$VAE_LATENT" \
        --runs "$4" --warmup "$5" --umt5-seq-len "$UMT5_SEQ_LEN" --peer-dir "$PEER_DIR" > "$out/peer.json" 2> "$out/peer.log"
    rc=$?
    cat "$out/peer.log"
    [ $rc = 0 ] || { echo "PyTorch peer failed ($1 $2)"; return 0; }
    /usr/bin/python3 - "$out/peer.json" "$1" "$2" >> "$R" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))[sys.argv[2]]
extra = " tokens=%d" % d["tokens"] if "tokens" in d else ""
print("RESULT who=pytorch case=%s precision=%s seconds=%.4f attention_s=%.3f cpu_s=%.2f peak_rss_gb=%.3f%s"
      % (sys.argv[2], sys.argv[3], d["median_s"], d["attention_s"], d["cpu_s"], d["peak_rss_gb"], extra))
PY
}

# sd.cpp: one sd-cli run (f16 weights as made, or the GGUF $5 with its label $6 and case $7;
# flash attention, 1 step, CFG 5, Euler, flow shift 3), stopped after sampling when $4 = dit; its
# stage times as RESULT lines
sdcpp() {   # frames width height dit|all [diffusion model file, precision label, case]
    [ $sd_ok = 1 ] || return 0
    note "sd.cpp $1 frames ${2}x$3 ($4${5:+, $(basename "$5")})"
    log="$out/sdcpp.log"
    /usr/bin/time -v "$SDCPP" -M vid_gen --diffusion-model "${5:-$SDCPP_MODELS/wan2.1_t2v_1.3B_fp16.safetensors}" \
        --vae "$SDCPP_MODELS/wan_2.1_vae.safetensors" --t5xxl "$SDCPP_MODELS/umt5_xxl_fp16.safetensors" \
        -p "a lovely cat" -n "static, blurry, low quality" --cfg-scale 5.0 --sampling-method euler --flow-shift 3.0 \
        -W "$2" -H "$3" --video-frames "$1" --steps 1 -t "$THREADS" -s 42 -v --diffusion-fa -o "$out/sdcpp.avi" \
        > "$log" 2>&1 &
    tpid=$!
    c0= c1=
    while kill -0 $tpid 2>/dev/null; do   # the CPU time of sampling alone (±2 s of polling): from the end of the text conditioning to the end of sampling
        sleep 2
        sd=$(ps -o pid= --ppid $tpid | tr -d " " | head -1)
        [ -n "$sd" ] || continue
        if [ -z "$c0" ] && grep -aq "get_learned_condition completed" "$log"; then c0=$(cut -d' ' -f14,15 "/proc/$sd/stat" 2>/dev/null); fi
        if [ -z "$c1" ] && grep -aq "sampling completed" "$log"; then
            c1=$(cut -d' ' -f14,15 "/proc/$sd/stat" 2>/dev/null)
            [ "$4" = dit ] && kill "$sd" 2>/dev/null
        fi
    done
    wait $tpid
    echo "sampling CPU ticks: ${c0:-?} -> ${c1:-?} ($(getconf CLK_TCK) per s)" >> "$log"
    tr '\r' '\n' < "$log" | grep -aE "sampling completed|sampling CPU|get_learned_condition completed|decode_first_stage completed|Maximum resident|Elapsed \(wall|User time|System time|error|failed" | tail -12
    /usr/bin/python3 - "$log" "$1" "$2" "$3" "$4" "$(getconf CLK_TCK)" "${6:-f16}" "${7:-wan13}" >> "$R" <<'PY'
import re, sys
t = open(sys.argv[1], errors="replace").read().replace("\r", "\n")
f, w, h, kind = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
prec, case = sys.argv[7], sys.argv[8]
def num(p):
    m = re.search(p, t)
    return float(m.group(1)) if m else None
rss = num(r"Maximum resident set size \(kbytes\): (\d+)")
rss = rss / 1e6 if rss else float("nan")
m = re.search(r"sampling CPU ticks: (\d+) (\d+) -> (\d+) (\d+)", t)
cpu = (int(m.group(3)) + int(m.group(4)) - int(m.group(1)) - int(m.group(2))) / float(sys.argv[6]) if m else float("nan")
tokens = ((f - 1) // 4 + 1) * (h // 16) * (w // 16)
s = num(r"sampling completed, taking ([\d.]+)s")
if kind == "dit" and s is not None:
    print("RESULT who=sdcpp case=%s precision=%s seconds=%.4f tokens=%d peak_rss_gb=%.3f cpu_s=%.1f" % (case, prec, s, tokens, rss, cpu))
c = num(r"get_learned_condition completed, taking ([\d.]+)s")
if c is not None and case == "wan13":
    print("RESULT who=sdcpp case=umt5 precision=f16 seconds=%.4f tokens=512" % c)
d = num(r"decode_first_stage completed, taking ([\d.]+)s")
if kind == "all" and d is not None:
    print("RESULT who=sdcpp case=wanvae precision=f16 seconds=%.4f peak_rss_gb=%.3f" % (d, rss))
PY
}

# ---- the machine's peaks ------------------------------------------------------------------------
note "bench_kernels $THREADS 3 quick (the machine's measured peaks)"
"$BUILD/bench/bench_kernels" "$THREADS" 3 quick | tee "$out/kernels.txt" | grep -E "^threads|^peak"

# ---- alternated: ours, PyTorch, sd.cpp per case and size ------------------------------------------
for c in wan13 wan14; do
    has $c || continue
    model=$( [ $c = wan13 ] && echo 1.3b || echo 14b )
    for f in $FRAMES; do
        for p in $PRECISIONS; do
            note "ours $c $f frames $p"
            "$BUILD/bench/bench_wan_stage2" --model $model --frames "$f" --layers "$LAYERS" --runs "$RUNS" \
                --threads "$THREADS" --precision "$p" | tee "$out/ours.txt"
            grep '^RESULT ' "$out/ours.txt" | sed 's/^RESULT /RESULT who=ours /' >> "$R"
            peer $c "$p" "$f" "$RUNS" 0
        done
        [ $c = wan13 ] && [ -f "$SDCPP_MODELS/wan2.1_t2v_1.3B_fp16.safetensors" ] && sdcpp "$f" 832 480 dit
    done
done
if has wanvae; then
    F=$(echo "$VAE_LATENT" | cut -d, -f1) h=$(echo "$VAE_LATENT" | cut -d, -f2) w=$(echo "$VAE_LATENT" | cut -d, -f3)
    mkdir -p "$out/vae"
    for p in $PRECISIONS; do
        note "ours wanvae $VAE_LATENT $p"
        "$BUILD/bench/bench_wan_vae" "$F" "$h" "$w" --model "$out/vae" --threads "$THREADS" --precision "$p" | tee "$out/ours.txt"
        cpu=$(sed -n 's/.*decode .*(.*CPU \([0-9.]*\) s,.*/\1/p' "$out/ours.txt")
        grep '^RESULT ' "$out/ours.txt" | sed "s/^RESULT /RESULT who=ours /; s/case=wan_vae/case=wanvae/; s/\$/ cpu_s=${cpu:-0}/" >> "$R"
        peer wanvae "$p" "" 1 0
    done
fi
if has umt5; then
    for p in $PRECISIONS; do
        for n in 512 "$UMT5_SEQ_LEN"; do
            note "ours umt5 $p, $n real tokens"
            "$BUILD/bench/bench_stage1" --umt5 --seq-len "$n" --layers "$LAYERS" --threads "$THREADS" --precision "$p" | tee "$out/ours.txt"
            grep '^RESULT ' "$out/ours.txt" | sed 's/^RESULT /RESULT who=ours /' >> "$R"
        done
        peer umt5 "$p" "" 3 1
    done
fi
if has wanvae || has umt5; then
    F=$(echo "$VAE_LATENT" | cut -d, -f1) h=$(echo "$VAE_LATENT" | cut -d, -f2) w=$(echo "$VAE_LATENT" | cut -d, -f3)
    sdcpp $(( (F - 1) * 4 + 1 )) $((w * 8)) $((h * 8)) all
fi
if has wangguf; then   # the same GGUF files for ours and sd.cpp, rounds alternated
    gdir="$out/gguf_$GGUF_MODEL"
    [ $GGUF_MODEL = wan14b ] && export SD_WAN2_AS_14B=1
    r=0
    while [ $r -lt "$GGUF_ROUNDS" ]; do
        r=$((r + 1))
        note "ours wangguf $GGUF_MODEL $GGUF_FRAMES frames, round $r"
        OMP_WAIT_POLICY=PASSIVE "$BUILD/bench/bench_quant" --part models --models "$GGUF_MODEL" --frames "$GGUF_FRAMES" \
            --rounds 1 --threads "$THREADS" --dir "$gdir" --precision "$GGUF_PRECISION" | tee "$out/ours.txt"
        grep '^RESULT ' "$out/ours.txt" | sed "s/\$/ round=$r/" >> "$R"
        sdcpp "$GGUF_FRAMES" 832 480 dit "$gdir/q8_0.gguf" q8_0 "gguf_$GGUF_MODEL"
        sdcpp "$GGUF_FRAMES" 832 480 dit "$gdir/q4_k_m.gguf" q4_k_m "gguf_$GGUF_MODEL"
    done
fi

# ---- the table ---------------------------------------------------------------------------------
echo
/usr/bin/python3 - "$R" "$out/kernels.txt" "$LAYERS" "$VAE_LATENT" "$(date -u +%F)" "$(cut -d' ' -f1-3 /proc/loadavg)" "$THREADS" <<'PY'
import re, sys
rows = [dict(x.split("=", 1) for x in l.split()[1:]) for l in open(sys.argv[1]) if l.startswith("RESULT ")]
k = open(sys.argv[2]).read()
m = re.search(r"f32 ([\d.]+) GFLOP/s \([^)]*\), bf16 ([\d.]+) GFLOP/s", k)
peak = {"f32": float(m.group(1)), "bf16": float(m.group(2))} if m else {}
layers, lat, day, load, threads = sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6], float(sys.argv[7])
def get(who, case, prec, tokens=None, seq=None):
    for r in rows:
        if r["who"] == who and r["case"] == case and r["precision"] == prec and \
           (tokens is None or r.get("tokens") == str(tokens)) and (seq is None or r.get("seq_len") == str(seq)):
            return r
    return None
def s(r):   # wall seconds (the process's CPU seconds: less disturbed by other load)
    if not r: return "—"
    c = float(r.get("cpu_s", "nan"))
    return "%.2f s" % float(r["seconds"]) + ((" (%.0f)" if c >= 10 else " (%.1f)") % c if c == c else "")
def ratio(a, b):   # wall ratio (CPU-seconds ratio)
    if not (a and b): return "—"
    r = "%.2f×" % (float(b["seconds"]) / float(a["seconds"]))
    ca, cb = float(a.get("cpu_s", "nan")), float(b.get("cpu_s", "nan"))
    return r + (" (%.2f×)" % (cb / ca) if ca == ca and cb == cb and ca > 0 else "")
print("Wan 2.1 side by side, %s, %s layers, load average at the end %s; peaks (bench_kernels, per CPU-s): f32 %s, bf16 %s GFLOP/s"
      % (day, layers, load, peak.get("f32", "?"), peak.get("bf16", "?")))
print()
names = {"wan13": "Wan-1.3B dims", "wan14": "Wan-14B dims"}
if any(r["case"] in names or r["case"] in ("wanvae", "umt5") for r in rows):
    print("| case | PyTorch f32 | PyTorch bf16 | sd.cpp f16+fa | ours f32 | ours bf16 | ours bf16 / PyTorch bf16 | ours bf16 / sd.cpp |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
toks = sorted({(r["case"], int(r["tokens"])) for r in rows if r["case"] in names and "tokens" in r})
for c, t in toks:
    o = {p: get("ours", c, p, t) for p in ("f32", "bf16")}
    pt = {p: get("pytorch", c, p, t) for p in ("f32", "bf16")}
    sd = get("sdcpp", c, "f16", t)
    print("| %s, %s layers, %d tokens, one CFG step | %s | %s | %s | %s | %s | %s | %s |" % (
        names[c], layers, t, s(pt["f32"]), s(pt["bf16"]), s(sd), s(o["f32"]), s(o["bf16"]), ratio(o["bf16"], pt["bf16"]),
        ratio(o["bf16"], sd)))
if any(r["case"] == "wanvae" for r in rows):
    o = {p: get("ours", "wanvae", p) for p in ("f32", "bf16")}
    pt = {p: get("pytorch", "wanvae", p) for p in ("f32", "bf16")}
    sd = get("sdcpp", "wanvae", "f16")
    best = min((x for x in o.values() if x), key=lambda x: float(x["seconds"]), default=None)
    print("| Wan VAE decode, latent %s | %s | %s | %s | %s | %s | %s | %s (best of ours) |" % (
        lat, s(pt["f32"]), s(pt["bf16"]), s(sd), s(o["f32"]), s(o["bf16"]), ratio(o["bf16"], pt["bf16"]), ratio(best, sd)))
if any(r["case"] == "umt5" for r in rows):
    pt = {p: get("pytorch", "umt5", p) for p in ("f32", "bf16")}
    sd = get("sdcpp", "umt5", "f16")
    for seq in sorted({int(r["seq_len"]) for r in rows if r["case"] == "umt5" and r["who"] == "ours"}, reverse=True):
        o = {p: get("ours", "umt5", p, seq=seq) for p in ("f32", "bf16")}
        print("| UMT5-XXL dims, %s layers, prompt + negative, 512 tokens (ours: %d real) | %s | %s | %s | %s | %s | %s | %s |" % (
            layers, seq, s(pt["f32"]), s(pt["bf16"]), s(sd), s(o["f32"]), s(o["bf16"]), ratio(o["bf16"], pt["bf16"]), ratio(o["bf16"], sd)))
gg = sorted({r["case"] for r in rows if r["case"].startswith("gguf_")})
for c in gg:
    def med(who, prec):   # the best round (wall) of who's step on this file: both sides alike
        rs = sorted((r for r in rows if r["who"] == who and r["case"] == c and r["precision"] == prec),
                    key=lambda r: float(r["seconds"]))
        return rs[0] if rs else None
    print()
    print("| %s, %s layers, one CFG step, %s tokens, best of %d rounds | ours (dequantized tiles, %s) | ours (int8) | sd.cpp | ours best / sd.cpp |" % (
        c[5:], layers, next((r["tokens"] for r in rows if r["case"] == c and "tokens" in r), "?"),
        sum(1 for r in rows if r["who"] == "ours" and r["case"] == c and r["precision"] == "bf16"),
        next((r["compute"] for r in rows if r["case"] == c and "compute" in r), "?")))
    print("| --- | --- | --- | --- | --- |")
    b = med("ours", "bf16")
    print("| bf16 weights (ours) | %s | | | |" % s(b))
    for q in ("q8_0", "q4_k_m"):
        d, i, sd = med("ours", q + "_dequant"), med("ours", q + "_int8"), med("sdcpp", q)
        best = min((x for x in (d, i) if x), key=lambda x: float(x["seconds"]), default=None)
        print("| %s (the same file) | %s | %s | %s | %s |" % (q.upper(), s(d), s(i), s(sd), ratio(best, sd)))
print("(wall seconds, in brackets the process's CPU seconds (sd.cpp: of its sampling); ratios of wall times, in brackets of"
      " CPU seconds, > 1: ours is faster; all numbers from this one run; sd.cpp's UMT5 time is its whole text conditioning)")
print()
if any(r["who"] == "ours" and r["case"] in names for r in rows):
    print("Ours against the peaks (wall rates; per CPU-s: the step's FLOPs / (CPU seconds / threads), what it does while it has the cores):")
    print("| case | precision | tokens | linears GFLOP/s | attention GFLOP/s | whole step | whole step per CPU-s (% of peak) | peak RSS |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for r in rows:
    if r["who"] == "ours" and r["case"] in names:
        pk = peak.get(r["precision"])
        pcs = float(r["gflops"]) * float(r["seconds"]) / (float(r["cpu_s"]) / threads)
        print("| %s | %s | %s | %s | %s | %s GFLOP/s | %.0f GFLOP/s (%s) | %s GB |" % (names[r["case"]], r["precision"], r["tokens"],
              r["lin_gflops"], r["att_gflops"], r["gflops"], pcs, "%.0f%%" % (100 * pcs / pk) if pk else "—", r["peak_rss_gb"]))
print()
for r in rows:
    if r["who"] != "ours" and "peak_rss_gb" in r:
        print("peak RSS %s %s %s%s: %s GB" % (r["who"], r["case"], r["precision"], " %s tokens" % r["tokens"] if "tokens" in r else "",
                                              r["peak_rss_gb"]))
PY
