#!/bin/sh
# Peak RSS of stage 2 for a Wan 2.2 A14B Q8_0 run at the real size (docs/models.md "Wan 2.2"):
# bench_a14b_rss writes two random-weight Q8_0 expert GGUFs (LAYERS of 40 by default: ~15 GB each)
# and the files stage 2 reads; stage 2 runs 2 steps (the first on the high-noise expert, the second
# on the low-noise one) of a small video under /usr/bin/time -v. The peak must stay below one
# expert's file + 3 GB: the high-noise expert is unmapped before the low-noise one is mapped.
#   bench/a14b_rss.sh OUT_DIR [LAYERS]     (from the repository root, after make bin/stage2 build/bench/bench_a14b_rss)
set -e
OUT=${1:?usage: bench/a14b_rss.sh OUT_DIR [LAYERS]}
LAYERS=${2:-40}
BUILD=${BUILD:-build}
"$BUILD/bench/bench_a14b_rss" "$OUT" "$LAYERS"
/usr/bin/time -v "$BUILD/bin/stage2" --input_dir "$OUT/run" --model_dir "$OUT/model" --transformer "$OUT/high.gguf" \
    --transformer_2 "$OUT/low.gguf" --num_inference_steps 2 --frames 1 --height 128 --width 128 --guidance_scale 4 \
    --guidance_scale_2 3 2>&1 | tee "$OUT/stage2.log"
EXPERT=$(stat -c %s "$OUT/high.gguf")
PEAK_KB=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$OUT/stage2.log")
echo "RESULT layers=$LAYERS expert_gb=$(echo "$EXPERT / 1e9" | bc -l | cut -c1-5) peak_rss_gb=$(echo "$PEAK_KB * 1024 / 1e9" | bc -l | cut -c1-5) limit_gb=$(echo "$EXPERT / 1e9 + 3" | bc -l | cut -c1-5)"
test $((PEAK_KB * 1024)) -le $((EXPERT + 3000000000))
