#!/bin/sh
# A whole LTX-Video 2B distilled video at full size through the three programs, each under /usr/bin/time -v
# (docs/performance.md "LTX-Video 2B distilled, whole video"). The model directory comes from
#   /usr/bin/python3 scripts/make_ltx_full_model.py MODEL_DIR          (random bf16 weights, ~16 GB)
#   bench/ltx_full_run.sh MODEL_DIR OUT_DIR [TIMESTEPS] [PRECISION]     (from the repository root, after make bin/stage1..3)
# TIMESTEPS: the 0.9.7 / 0.9.8 distilled list by default (8 steps, guidance 1); give its first k entries for a
# shorter stage 2 (its per-step time then extrapolates). PRECISION: stage 2's --precision (default bf16).
# Stage 3 decodes with the checkpoint's decode_timestep 0.05 / decode_noise_scale 0.025, tiled (TILING=on, the
# default) or untiled (TILING=off). FRAMES, HEIGHT, WIDTH: the video (121, 512, 768). STAGES="1 2 3" selects stages. Each stage's log is OUT_DIR/stageN.log; the
# last lines printed are one RESULT line per stage: wall seconds, CPU seconds, peak RSS.
set -e
MODEL=${1:?usage: bench/ltx_full_run.sh MODEL_DIR OUT_DIR [TIMESTEPS] [PRECISION]}
OUT=${2:?usage: bench/ltx_full_run.sh MODEL_DIR OUT_DIR [TIMESTEPS] [PRECISION]}
TS=${3:-1000,993,987,981,975,909,725,0.03}
PREC=${4:-bf16}
TILING=${TILING:-on}
FRAMES=${FRAMES:-121} HEIGHT=${HEIGHT:-512} WIDTH=${WIDTH:-768}
STAGES=${STAGES:-1 2 3}
BIN=${BIN:-bin}
mkdir -p "$OUT"
run() {
    n=$1; shift
    echo "load before stage $n: $(cat /proc/loadavg)" > "$OUT/stage$n.log"
    /usr/bin/time -v "$@" >> "$OUT/stage$n.log" 2>&1
    echo "load after stage $n: $(cat /proc/loadavg)" >> "$OUT/stage$n.log"
}
for s in $STAGES; do
    case $s in
    1) run 1 "$BIN/stage1" --model_dir "$MODEL" --output_dir "$OUT" \
           --prompt "A red fox trots through fresh snow at dawn, its breath steaming, the camera tracking low beside it." ;;
    2) run 2 "$BIN/stage2" --input_dir "$OUT" --model_dir "$MODEL" --frames "$FRAMES" --height "$HEIGHT" --width "$WIDTH" \
           --timesteps "$TS" --guidance_scale 1 --precision "$PREC" --checkpoint_every 0 ;;
    3) run 3 "$BIN/stage3" --input_dir "$OUT" --model_dir "$MODEL" --decode_timestep 0.05 --decode_noise_scale 0.025 \
           --tiling "$TILING" --output_video "$OUT/video_tiling_$TILING.mp4" ;;
    esac
done
for s in $STAGES; do
    f="$OUT/stage$s.log"
    echo "RESULT stage=$s wall=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$f")" \
         "cpu_s=$(awk -F': ' '/User time|System time/ {t += $2} END {print t}' "$f")" \
         "peak_rss_gb=$(awk -F': ' '/Maximum resident set size/ {printf "%.2f", $2 * 1024 / 1e9}' "$f")"
done
