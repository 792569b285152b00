#!/bin/sh
# Side-by-side benchmark for HunyuanVideo-1.5, Wan 2.2 and LTX-Video (issues 31, 32, 33): our bench
# programs, the PyTorch peer (bench/pt_video_peer.py on the upstream trees of ../shared/peer) and, where its
# snapshot runs the model and it is set up, stable-diffusion.cpp, at the real widths with LAYERS random
# layers, measured in ONE run on this machine, alternated case by case (ours, then the peer, per precision).
# Prints a table: wall and process CPU seconds, GFLOP/s per CPU-second (the case's FLOPs as our program counts
# them / (CPU s / threads): what a side does while it has the cores, less disturbed by other load), its % of
# this machine's peak (bench_kernels' measured f32 / bf16 peaks, bench/bench_peaks.h) and the ratio ours/peer.
# Nothing is hard-coded: a peer that is not set up is left out with one line.
#
#   sh bench/side_by_side_video.sh PART      PART: hv15, wan22 or ltx (a comma list runs several)
#   make bench PART=hv15|wan22|ltx           the same
#
#   hv15   hv15     HunyuanVideo15Transformer3DModel, one forward (one CFG branch) at HV15_FRAMES frames of
#                   HV15_SIZE (HxW), text 1000 rows (120 valid), T2V            (bench_hv15); sd.cpp: one Euler
#                   step at CFG 1 (one forward; the 2nd of 2 steps), 120 text rows (SDCPP)
#          qwen     Qwen2.5-VL-7B text model on one prompt, 1108 tokens (120 valid) (bench_qwen)
#          hv15vae  AutoencoderKLHunyuanVideo15 decode of HV15_VAE_LATENT      (bench_vae_dir, same weights);
#                   sd.cpp: its decode of the same latent shape (own random weights)
#   wan22  wan5     Wan2.2-TI2V-5B transformer, one CFG step (2 forwards), WAN5_FRAMES frames of WAN5_SIZE
#                   (bench_wan_stage2 --model 5b); sd.cpp: one Euler step with CFG (the 2nd of 2), same tokens
#          wan22vae the Wan 2.2 VAE decode of WAN22_VAE_LATENT                   (bench_wan_vae --wan22); sd.cpp too
#   ltx    ltx2b    LTX-Video 2B transformer, one CFG step (1 forward at batch 2), LTX_FRAMES frames of LTX_SIZE
#                   (bench_ltx_stage2); sd.cpp runs LTX-2 only (not LTX-Video 0.9): no sd.cpp row
#          ltxvae   AutoencoderKLLTXVideo 0.9.5 decode of LTX_VAE_LATENT at t = 0.05 (bench_vae_dir, same weights)
# env: BUILD (build), THREADS (2), PRECISIONS ("f32 bf16"; ours), PEER_PRECISIONS (PyTorch's; PRECISIONS), LAYERS (2), RUNS (3) and WARMUP (1): the peer's
#      timed runs (median) and warm-ups, and our warm-ups where a program has them; CASES (a subset of the
#      part's cases), PEER_DIR (../shared/peer), HV15_FRAMES (9), HV15_SIZE (480x848), HV15_VAE_LATENT
#      (2,10,16), WAN5_FRAMES (9), WAN5_SIZE (704x1280), WAN22_VAE_LATENT (2,11,20), LTX_FRAMES (25),
#      LTX_SIZE (512x768), LTX_VAE_LATENT (2,8,12), VAE_DIR (where the peer's random VAE weights are
#      written for ours to read; default a temp dir, removed at the end), SDCPP (sd-cli, built as in
#      bench/peers/sdcpp/README.md) and SDCPP_MODELS (its random files, bench/peers/sdcpp/make_sd_random.py:
#      wan2.2_ti2v_5B_fp16, wan2.2_vae, umt5_xxl_fp16 for wan22; hunyuanvideo1.5_480p_t2v_fp16, hunyuanvideo15_vae_fp16,
#      qwen_2.5_vl_7b_fp16 for hv15, .safetensors each).
set -u
BUILD=${BUILD:-build}
THREADS=${THREADS:-2}
PRECISIONS=${PRECISIONS:-"f32 bf16"}
PEER_PRECISIONS=${PEER_PRECISIONS:-$PRECISIONS}
ALL_PRECISIONS=$(echo $PEER_PRECISIONS $PRECISIONS | tr ' ' '\n' | awk '!seen[$0]++' | tr '\n' ' ')
LAYERS=${LAYERS:-2}
RUNS=${RUNS:-3}
WARMUP=${WARMUP:-1}
PEER_DIR=${PEER_DIR:-../shared/peer}
HV15_FRAMES=${HV15_FRAMES:-9} HV15_SIZE=${HV15_SIZE:-480x848} HV15_VAE_LATENT=${HV15_VAE_LATENT:-2,10,16}
WAN5_FRAMES=${WAN5_FRAMES:-9} WAN5_SIZE=${WAN5_SIZE:-704x1280} WAN22_VAE_LATENT=${WAN22_VAE_LATENT:-2,11,20}
LTX_FRAMES=${LTX_FRAMES:-25} LTX_SIZE=${LTX_SIZE:-512x768} LTX_VAE_LATENT=${LTX_VAE_LATENT:-2,8,12}
SDCPP=${SDCPP:-} SDCPP_MODELS=${SDCPP_MODELS:-}
PARTS=${1:-}
[ -n "$PARTS" ] || { echo "side_by_side_video.sh: give a PART: hv15, wan22 or ltx" >&2; exit 2; }
all=
for p in $(echo "$PARTS" | tr ',' ' '); do
    case $p in
    hv15) all="$all hv15 qwen hv15vae";;
    wan22) all="$all wan5 wan22vae";;
    ltx) all="$all ltx2b ltxvae";;
    *) echo "side_by_side_video.sh: unknown PART '$p' (hv15, wan22, ltx)" >&2; exit 2;;
    esac
done
CASES=${CASES:-$all}
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp -d)
vae_dir=${VAE_DIR:-$out/vae}
trap 'rm -rf "$out"' EXIT
trap 'echo "side_by_side_video.sh: interrupted" >&2; exit 130' INT TERM
R="$out/results.txt"
. "$here"/fresh_bins.sh
fresh_bins side_by_side_video.sh "$here/.." bench_kernels bench_hv15 bench_qwen bench_vae_dir bench_wan_stage2 bench_wan_vae bench_ltx_stage2
touch "$R"
has() { case " $CASES " in *" $1 "*) return 0;; esac; return 1; }
note() { echo "== $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg): $*"; }
H() { echo "${1%x*}"; }
W() { echo "${1#*x}"; }

# ---- the peers that are set up --------------------------------------------------------------------------
peer_ok=0
if [ -f "$PEER_DIR/refenv_h15.py" ] && [ -d "${REFSRC_H15:-$PEER_DIR/refsrc_h15}/diffusers" ] && \
   [ -d "${REFSRC_WAN22:-$PEER_DIR/refsrc_wan22}/diffusers" ] && /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    peer_ok=1
else
    echo "note: the PyTorch peer (torch + ../shared/peer/refsrc_h15, refsrc_wan22; ../shared/peer/README.md) is not set up: left out"
fi
sd_files() { [ -n "$SDCPP" ] && [ -x "$SDCPP" ] || return 1; for f; do [ -f "$SDCPP_MODELS/$f" ] || return 1; done; }
sd_wan=0 sd_hv=0
sd_files wan2.2_ti2v_5B_fp16.safetensors wan2.2_vae.safetensors umt5_xxl_fp16.safetensors && sd_wan=1
sd_files hunyuanvideo1.5_480p_t2v_fp16.safetensors hunyuanvideo15_vae_fp16.safetensors qwen_2.5_vl_7b_fp16.safetensors \
    && [ -f "$here/sdcpp_hv15_prompt.txt" ] && sd_hv=1
if { { has wan5 || has wan22vae; } && [ $sd_wan = 0 ]; } || { { has hv15 || has hv15vae; } && [ $sd_hv = 0 ]; }; then
    echo "note: stable-diffusion.cpp is not set up for this part (SDCPP, SDCPP_MODELS; bench/peers/sdcpp/README.md): left out"
fi
if has ltx2b; then echo "note: stable-diffusion.cpp's snapshot runs LTX-2 (LTXAV), not LTX-Video 0.9: no sd.cpp row for LTX"; fi

# ours: a bench program; its RESULT line normalised to who=ours case=.. precision=.. seconds=.. cpu_s=.. gflop=..
ours() {   # case precision command...
    c=$1 p=$2; shift 2
    case " $PRECISIONS " in *" $p "*) ;; *) return 0;; esac
    note "ours $c $p"
    "$@" > "$out/ours.txt" 2>&1
    rc=$?
    grep -v '^RESULT ' "$out/ours.txt" | tail -4
    [ $rc = 0 ] || { echo "ours $c $p failed (exit $rc)"; return 0; }
    /usr/bin/python3 - "$out/ours.txt" "$c" "$p" >> "$R" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
kv = dict(x.split("=", 1) for x in re.search(r"^RESULT (.*)$", t, re.M).group(1).split())
s = float(kv["seconds"])
cpu = kv.get("cpu_s") or kv.get("cpu_seconds")
if cpu is None:   # bench_wan_vae: "decode X s (...; CPU Y s, ...), conv Z GFLOP nominal"
    m = re.search(r"CPU ([\d.]+) s, convs [\d.]+ s\), conv ([\d.]+) GFLOP", t)
    cpu, kv["gflop"] = m.group(1), m.group(2)
gflop = float(kv["gflop"]) if "gflop" in kv else float(kv["gflops"]) * s
print("RESULT who=ours case=%s precision=%s seconds=%.3f cpu_s=%s gflop=%.1f peak_rss_gb=%s"
      % (sys.argv[2], sys.argv[3], s, cpu, gflop, kv.get("peak_rss_gb", "nan")))
PY
}

# the PyTorch peer: one case in one precision
peer() {   # case precision [pt_video_peer.py args...]
    [ $peer_ok = 1 ] || return 0
    case " $PEER_PRECISIONS " in *" $2 "*) ;; *) return 0;; esac
    c=$1 p=$2; shift 2
    note "PyTorch $c $p (runs $RUNS, warm-up $WARMUP)"
    OMP_NUM_THREADS=$THREADS /usr/bin/python3 "$here/pt_video_peer.py" --case "$c" --dtype "$p" --runs "$RUNS" \
        --warmup "$WARMUP" --threads "$THREADS" --layers "$LAYERS" --peer-dir "$PEER_DIR" "$@" \
        > "$out/peer.json" 2> "$out/peer.log"
    rc=$?
    grep -E "run|warm|saved|Error|error" "$out/peer.log" | tail -6
    [ $rc = 0 ] || { echo "PyTorch peer failed ($c $p):"; tail -3 "$out/peer.log"; return 0; }
    /usr/bin/python3 - "$out/peer.json" "$p" >> "$R" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("RESULT who=pytorch case=%s precision=%s seconds=%.3f cpu_s=%.2f attention_s=%.2f peak_rss_gb=%.3f"
      % (d["case"], sys.argv[2], d["median_s"], d["cpu_s"], d["attention_s"], d["peak_rss_gb"]))
PY
}

# stable-diffusion.cpp (f16 weights, flash attention, Euler), stopped once the stage timed is done. sd.cpp loads a
# model's weights when it first runs it (inside its sampling / decode), so the stage is timed past that:
# step: the second of 2 sampling steps (CFG as given) for our transformer case, wall = its progress line's s/it,
# CPU from the "1/2" progress line to "sampling completed"; vae: the decode of the latent the steps leave (sized to
# our VAE case: frames 4(F-1)+1, 16 px per latent row/column), wall = "decode_first_stage completed" less the VAE's
# "loading tensors" time, CPU from the VAE's "prepared params backend buffer" line on. CPU: the process's CPU time,
# read from /proc every second (+-1 s).
sdcpp() {   # case step|vae family(wan|hv) frames height width cfg
    c=$1 what=$2 fam=$3
    case $fam in wan) [ $sd_wan = 1 ] || return 0;; hv) [ $sd_hv = 1 ] || return 0;; esac
    note "sd.cpp $c ($what): $4 frames $6x$5, cfg $7"
    log="$out/sdcpp.log"
    if [ "$fam" = wan ]; then
        set -- --diffusion-model "$SDCPP_MODELS/wan2.2_ti2v_5B_fp16.safetensors" --vae "$SDCPP_MODELS/wan2.2_vae.safetensors" \
            --t5xxl "$SDCPP_MODELS/umt5_xxl_fp16.safetensors" -p "a lovely cat" -n "static, blurry, low quality" \
            --flow-shift 5.0 --video-frames "$4" -H "$5" -W "$6" --cfg-scale "$7"
    else   # the prompt tokenizes to 114 Qwen tokens with bench/peers/sdcpp's merges stub: 120 text rows as ours
        set -- --diffusion-model "$SDCPP_MODELS/hunyuanvideo1.5_480p_t2v_fp16.safetensors" \
            --vae "$SDCPP_MODELS/hunyuanvideo15_vae_fp16.safetensors" --llm "$SDCPP_MODELS/qwen_2.5_vl_7b_fp16.safetensors" \
            -p "$(cat "$here/sdcpp_hv15_prompt.txt")" --flow-shift 5.0 --video-frames "$4" -H "$5" -W "$6" --cfg-scale "$7"
    fi
    if [ "$what" = step ]; then steps=2 end="sampling completed"; else steps=1 end="decode_first_stage completed"; fi
    "$SDCPP" -M vid_gen "$@" --sampling-method euler --steps $steps -t "$THREADS" -s 42 -v --diffusion-fa \
        -o "$out/sdcpp.avi" > "$log" 2>&1 &
    sd=$!
    c0= c1= last=
    while kill -0 $sd 2>/dev/null; do
        sleep 1
        cur=$(cut -d' ' -f14,15 "/proc/$sd/stat" 2>/dev/null) && [ -n "$cur" ] && last=$cur
        if [ -z "$c0" ] && tr '\r' '\n' < "$log" | awk -v w="$what" '
                w == "step" && / 1\/2 - / { f = 1; exit }
                w == "vae" && /decode_video_outputs latent/ { d = 1 }
                w == "vae" && d && /prepared params backend buffer/ { f = 1; exit }
                END { exit !f }'; then
            c0=$(cut -d' ' -f14,15 "/proc/$sd/stat" 2>/dev/null)
        fi
        if grep -aq "$end" "$log"; then
            c1=$(cut -d' ' -f14,15 "/proc/$sd/stat" 2>/dev/null)
            kill "$sd" 2>/dev/null
            break
        fi
    done
    wait $sd 2>/dev/null
    # sd-cli may exit within the poll after its last line: then the last reading (<= 1 s before) ends the stage
    if [ -z "$c1" ] && grep -aq "$end" "$log"; then c1=$last; fi
    echo "stage CPU ticks: ${c0:-?} -> ${c1:-?}" >> "$log"
    tr '\r' '\n' < "$log" | grep -aE "blocks:|to [0-9]+ tokens|sample [0-9]|decode_video_outputs latent|loading tensors|2/2 - |$end|stage CPU|ERROR|error|abort" \
        | cut -c1-160 | tail -8
    /usr/bin/python3 - "$log" "$(getconf CLK_TCK)" "$c" "$what" >> "$R" <<'PY'
import re, sys
t = open(sys.argv[1], errors="replace").read().replace("\r", "\n")
c = re.search(r"stage CPU ticks: (\d+) (\d+) -> (\d+) (\d+)", t)
cpu = (int(c.group(3)) + int(c.group(4)) - int(c.group(1)) - int(c.group(2))) / float(sys.argv[2]) if c else float("nan")
s = None
if sys.argv[4] == "step":
    m = re.findall(r" 2/2 - ([\d.]+)(s/it|it/s)", t)
    if m and re.search(r"sampling completed", t):
        s = float(m[-1][0]) if m[-1][1] == "s/it" else 1.0 / float(m[-1][0])
else:
    d = re.search(r"decode_first_stage completed, taking ([\d.]+)s", t)
    i = t.find("decode_video_outputs latent")
    l = re.search(r"loading tensors completed, taking ([\d.]+)s", t[i:]) if i >= 0 else None
    if d:
        s = float(d.group(1)) - (float(l.group(1)) if l else 0.0)
if s is not None:
    print("RESULT who=sdcpp case=%s precision=f16 seconds=%.3f cpu_s=%.2f" % (sys.argv[3], s, cpu))
PY
}
vae_video() {   # F,h,w -> "frames height width" of the video whose latent that is (4x time, 16x space)
    echo "$1" | awk -F, '{print 4 * ($1 - 1) + 1, 16 * $2, 16 * $3}'
}

# ---- the machine's peaks --------------------------------------------------------------------------------
note "bench_kernels $THREADS 3 quick (the machine's measured peaks)"
"$BUILD/bench/bench_kernels" "$THREADS" 3 quick > "$out/kernels.txt" 2>&1
grep -E "^threads|^peak" "$out/kernels.txt"
cpu_name=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)

# ---- alternated: ours, then the peer, per case and precision ----------------------------------------------
if has hv15; then
    for p in $ALL_PRECISIONS; do
        ours hv15 "$p" "$BUILD/bench/bench_hv15" --frames "$HV15_FRAMES" --height "$(H $HV15_SIZE)" --width "$(W $HV15_SIZE)" \
            --layers "$LAYERS" --warmup "$WARMUP" --threads "$THREADS" --precision "$p"
        peer hv15 "$p" --frames "$HV15_FRAMES" --height "$(H $HV15_SIZE)" --width "$(W $HV15_SIZE)" --text 120
    done
    sdcpp hv15 step hv "$HV15_FRAMES" "$(H $HV15_SIZE)" "$(W $HV15_SIZE)" 1.0   # cfg 1: one forward, as ours
fi
if has qwen; then
    for p in $ALL_PRECISIONS; do
        ours qwen "$p" "$BUILD/bench/bench_qwen" --tokens 1108 --valid 120 --layers "$LAYERS" --warmup "$WARMUP" \
            --threads "$THREADS" --precision "$p"
        peer qwen "$p" --tokens 1108 --text 120
    done
fi
vae_dir_case() {   # case family latent
    c=$1 fam=$2 lat=$3
    rm -rf "$vae_dir"
    saved=0
    for p in $ALL_PRECISIONS; do
        if [ $saved = 0 ] && [ $peer_ok = 1 ]; then
            peer "$c" "$p" --latent "$lat" --save-dir "$vae_dir"
            saved=1
        elif [ $peer_ok = 1 ]; then
            peer "$c" "$p" --latent "$lat"
        fi
        if [ -f "$vae_dir/diffusion_pytorch_model.safetensors" ]; then
            ours "$c" "$p" "$BUILD/bench/bench_vae_dir" --family "$fam" --model "$vae_dir" --latent "$lat" \
                --warmup "$WARMUP" --threads "$THREADS" --precision "$p"
        else
            echo "ours $c: no random VAE directory (made by the PyTorch peer): left out"
        fi
    done
    rm -rf "$vae_dir"
}
if has hv15vae; then
    vae_dir_case hv15vae hv15 "$HV15_VAE_LATENT"
    sdcpp hv15vae vae hv $(vae_video "$HV15_VAE_LATENT") 1.0
fi
if has wan5; then
    for p in $ALL_PRECISIONS; do
        ours wan5 "$p" "$BUILD/bench/bench_wan_stage2" --model 5b --frames "$WAN5_FRAMES" --height "$(H $WAN5_SIZE)" \
            --width "$(W $WAN5_SIZE)" --layers "$LAYERS" --runs 1 --warmup "$WARMUP" --threads "$THREADS" --precision "$p"
        peer wan5 "$p" --frames "$WAN5_FRAMES" --height "$(H $WAN5_SIZE)" --width "$(W $WAN5_SIZE)"
    done
    sdcpp wan5 step wan "$WAN5_FRAMES" "$(H $WAN5_SIZE)" "$(W $WAN5_SIZE)" 5.0
fi
if has wan22vae; then
    F=$(echo "$WAN22_VAE_LATENT" | cut -d, -f1) h=$(echo "$WAN22_VAE_LATENT" | cut -d, -f2) w=$(echo "$WAN22_VAE_LATENT" | cut -d, -f3)
    mkdir -p "$out/wan22vae"
    for p in $ALL_PRECISIONS; do
        ours wan22vae "$p" "$BUILD/bench/bench_wan_vae" "$F" "$h" "$w" --wan22 --model "$out/wan22vae" --threads "$THREADS" \
            --precision "$p"
        peer wan22vae "$p" --latent "$WAN22_VAE_LATENT"
    done
    sdcpp wan22vae vae wan $(vae_video "$WAN22_VAE_LATENT") 1.0
fi
if has ltx2b; then
    for p in $ALL_PRECISIONS; do
        ours ltx2b "$p" "$BUILD/bench/bench_ltx_stage2" --model 2b --frames "$LTX_FRAMES" --height "$(H $LTX_SIZE)" \
            --width "$(W $LTX_SIZE)" --layers "$LAYERS" --runs $((WARMUP + 1)) --threads "$THREADS" --precision "$p"
        peer ltx2b "$p" --frames "$LTX_FRAMES" --height "$(H $LTX_SIZE)" --width "$(W $LTX_SIZE)"
    done
fi
has ltxvae && vae_dir_case ltxvae ltx "$LTX_VAE_LATENT"

# ---- the table ------------------------------------------------------------------------------------------
echo
/usr/bin/python3 - "$R" "$out/kernels.txt" "$THREADS" "$LAYERS" "$cpu_name" "$RUNS" "$WARMUP" <<'PY'
import re, sys, time
rows = [dict(x.split("=", 1) for x in l.split()[1:]) for l in open(sys.argv[1]) if l.startswith("RESULT ")]
k = open(sys.argv[2]).read()
m = re.search(r"f32 ([\d.]+) GFLOP/s \([^)]*\), bf16 ([\d.]+) GFLOP/s", k)
peak = {"f32": float(m.group(1)), "bf16": float(m.group(2))} if m else {}
threads, layers, cpu_name, runs, warmup = float(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6], sys.argv[7]
names = {"hv15": "HunyuanVideo-1.5 transformer, one forward", "qwen": "Qwen2.5-VL-7B text model, one prompt",
         "hv15vae": "HunyuanVideo-1.5 VAE decode", "wan5": "Wan2.2-TI2V-5B transformer, one CFG step",
         "wan22vae": "Wan 2.2 VAE decode", "ltx2b": "LTX-Video 2B transformer, one CFG step",
         "ltxvae": "LTX-Video 0.9.5 VAE decode"}
print("%s, %s, %d threads, %s layers, load average at the end %s; measured peaks per CPU-s: f32 %s, bf16 %s GFLOP/s"
      % (cpu_name, time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), threads, layers,
         open("/proc/loadavg").read().split()[0], peak.get("f32", "?"), peak.get("bf16", "?")))
print("PyTorch: median of %s runs after %s warm-up(s); ours: one run after the same warm-ups (bench_wan_vae: none)" % (runs, warmup))
print()
print("| case | who | precision | wall s | CPU s | GFLOP/s per CPU-s | % of peak | ours / this (CPU s) | ours / this (wall) |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
def get(who, case, prec):
    for r in rows:
        if r["who"] == who and r["case"] == case and r["precision"] == prec:
            return r
for case in names:
    mine = {p: get("ours", case, p) for p in ("f32", "bf16")}
    gflop = next((float(r["gflop"]) for r in mine.values() if r), None)
    for who in ("ours", "pytorch", "sdcpp"):
        for p in ("f32", "bf16", "f16"):
            r = get(who, case, p)
            if not r:
                continue
            s, c = float(r["seconds"]), float(r.get("cpu_s", "nan"))
            rate = gflop / (c / threads) if gflop and c == c and c > 0 else float("nan")
            pk = peak.get("bf16" if p in ("bf16", "f16") else "f32")
            pct = "%.0f%%" % (100 * rate / pk) if pk and rate == rate else "—"
            if who == "ours":
                rc = rw = ""
            else:   # against our best precision
                best = min((x for x in mine.values() if x), key=lambda x: float(x["cpu_s"]), default=None)
                rc = "%.2f×" % (c / float(best["cpu_s"])) if best and c == c else "—"
                rw = "%.2f×" % (s / float(best["seconds"])) if best else "—"
            print("| %s | %s | %s | %.2f | %.1f | %s | %s | %s | %s |" % (
                names[case], {"ours": "ours", "pytorch": "PyTorch", "sdcpp": "sd.cpp"}[who], p, s, c,
                "%.0f" % rate if rate == rate else "—", pct, rc, rw))
print()
print("(GFLOP: our program's count of the case's work, used for every side; ratios > 1: ours is faster, each peer row"
      " against our faster precision; CPU s: process CPU seconds of the timed run, sd.cpp: of the stage timed, its step or its VAE decode)")
for r in rows:
    if "attention_s" in r:
        print("PyTorch %s %s: attention (plain formula, torch 1.13) %s s of %s s wall" % (r["case"], r["precision"],
                                                                                        r["attention_s"], r["seconds"]))
PY
