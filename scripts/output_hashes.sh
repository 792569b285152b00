#!/bin/sh
# sha256 of every stage file and decoded frame for a fixed set of runs of the three programs on the
# tiny models and golden-case models: CogVideoX T2V / I2V / V2V, Wan T2V / I2V / V2V, step caching
# (TeaCache, FBCache), LoRA, a GGUF transformer, MPI --cfg_parallel, and a run stopped and resumed.
# Run it before and after a refactoring that must not change any output, and diff the two lists:
#   sh scripts/output_hashes.sh [BIN_DIR] > before.txt
# generation_config.json is hashed without its host-dependent keys (paths, timings).
set -eu
BIN=${1:-bin}
OUT=${OUT_HASH_DIR:-/tmp/cvx_output_hashes.$$}
G=tests/data/golden
W=tests/data/golden_wan
A=tests/data/golden_adapters
rm -rf "$OUT"; mkdir -p "$OUT"
q="--quiet --threads ${THREADS:-2}"

# one run: name, stage-1 flags, stage-2 flags, stage-3 flags (model flags included)
run() {
  d="$OUT/$1"; mkdir -p "$d"
  eval "$BIN/stage1 $q $2 --output_dir $d"
  eval "$BIN/stage2 $q $3 --input_dir $d --output_dir $d"
  eval "$BIN/stage3 $q $4 --input_dir $d --output_video $d/video.mp4 --output_frames $d/frames.safetensors"
}

COG=models/cogvideox-tiny-random
WAN=models/wan2.1-tiny-random
P="--prompt 'a red fox in the snow' --negative_prompt 'blurry'"
WS="--frames 9 --height 48 --width 64 --num_inference_steps 3 --seed 7"

run cog_t2v "$P --model_dir $COG" "--model_dir $COG --num_inference_steps 3 --seed 7" "--model_dir $COG"
run cog_t2v_dyncfg "$P --model_dir $COG" "--model_dir $COG --num_inference_steps 3 --seed 7 --use_dynamic_cfg --scheduler dpm" "--model_dir $COG"
run cog_teacache "$P --model_dir $COG" "--model_dir $COG --num_inference_steps 5 --seed 7 --cache teacache --cache_threshold 0.3" "--model_dir $COG"
run cog_fbcache "$P --model_dir $COG" "--model_dir $COG --num_inference_steps 5 --seed 7 --cache fbcache --cache_threshold 0.3" "--model_dir $COG"
M=$G/e2e_i2v_5b/model
run cog_i2v "$P --model_dir $M --image $G/e2e_i2v_5b/image.png" "--model_dir $M --num_inference_steps 2 --seed 7" "--model_dir $M"
M=$G/e2e_v2v_5b/model
run cog_v2v "$P --model_dir $M --video $G/e2e_v2v_5b/video" "--model_dir $M --num_inference_steps 3 --seed 7 --strength 0.7" "--model_dir $M"
M=$A/e2e_lora_cogvideox
run cog_lora "$P --model_dir $M/model" "--model_dir $M/model --num_inference_steps 2 --seed 7 --lora $M/lora_cog_r8.safetensors:0.8" "--model_dir $M/model"
M=$A/e2e_gguf_cogvideox_q8_0
run cog_gguf "$P --model_dir $M/model" "--model_dir $M/model --num_inference_steps 2 --seed 7 --transformer $M/cogvideox-Q8_0.gguf" "--model_dir $M/model"

run wan_t2v "$P --model_dir $WAN" "--model_dir $WAN $WS" "--model_dir $WAN"
run wan_teacache "$P --model_dir $WAN" "--model_dir $WAN $WS --num_inference_steps 6 --cache teacache --cache_threshold 0.3" "--model_dir $WAN"
run wan_teacache_ret "$P --model_dir $WAN" "--model_dir $WAN $WS --num_inference_steps 8 --cache teacache --cache_threshold 0.3 --teacache_ret_steps" "--model_dir $WAN"
run wan_fbcache "$P --model_dir $WAN" "--model_dir $WAN $WS --num_inference_steps 6 --cache fbcache --cache_threshold 0.3" "--model_dir $WAN"
M=$W/e2e_i2v/model
run wan_i2v "$P --model_dir $M --image $W/e2e_i2v/image.png --frames 9 --height 48 --width 64" "--model_dir $M --num_inference_steps 2 --seed 7" "--model_dir $M"
M=$W/e2e_v2v/model
run wan_v2v "$P --model_dir $M --video $W/e2e_v2v/video --height 48 --width 64" "--model_dir $M --num_inference_steps 3 --seed 7 --strength 0.7" "--model_dir $M"
M=$A/e2e_lora_wan
run wan_lora "$P --model_dir $M/model" "--model_dir $M/model $WS --lora $M/lora_kijai_r8.safetensors:1 --lora $M/lora_diffusers_r4.safetensors:0.5" "--model_dir $M/model"
M=$A/e2e_gguf_wan_q4_k
run wan_gguf "$P --model_dir $M/model" "--model_dir $M/model $WS --transformer $M/wan-Q4_K_M.gguf" "--model_dir $M/model"

# HunyuanVideo-1.5, LTX-Video (T2V, I2V, conditions, the timestep-conditioned VAE's decode options),
# Wan 2.2 (TI2V-5B T2V / I2V, A14B's two experts)
HV=models/hunyuanvideo15-tiny-random
run hv15_t2v "$P --model_dir $HV" "--model_dir $HV --frames 9 --height 32 --width 48 --num_inference_steps 3 --seed 7" "--model_dir $HV"
LTX=models/ltx-tiny-random
LS="--frames 9 --height 64 --width 96 --num_inference_steps 3 --seed 7"
run ltx_t2v "$P --model_dir $LTX" "--model_dir $LTX $LS" "--model_dir $LTX"
L=tests/data/golden_ltx
M=$L/e2e_i2v/pipeline_model
run ltx_i2v "$P --model_dir $M --image $L/e2e_i2v/image.png --height 64 --width 96" "--model_dir $M $LS" "--model_dir $M"
M=$L/e2e_condition/pipeline_model
run ltx_cond "$P --model_dir $M --condition $L/e2e_condition/condition0.png:0:1 --frames 9 --height 64 --width 96" "--model_dir $M $LS" "--model_dir $M"
M=$L/e2e_t2v_tsvae/pipeline_model
run ltx_tsvae "$P --model_dir $M" "--model_dir $M $LS" "--model_dir $M"
run ltx_tsvae_dt "$P --model_dir $M" "--model_dir $M $LS" "--model_dir $M --decode_timestep 0.03 --decode_noise_scale 0.02"
T22=models/wan2.2-ti2v-tiny-random
run wan22_ti2v_t2v "$P --model_dir $T22" "--model_dir $T22 --frames 9 --height 64 --width 96 --num_inference_steps 3 --seed 7" "--model_dir $T22"
run wan22_ti2v_i2v "$P --model_dir $T22 --image tests/data/golden_wan22/e2e_ti2v_i2v/image.png --frames 9 --height 64 --width 96" "--model_dir $T22 --num_inference_steps 3 --seed 7" "--model_dir $T22"
A22=models/wan2.2-a14b-tiny-random
run wan22_a14b "$P --model_dir $A22" "--model_dir $A22 --frames 9 --height 32 --width 48 --num_inference_steps 4 --seed 7 --guidance_scale_2 2.5" "--model_dir $A22"

# stop after 2 of 4 steps (with a cache), resume: the latents are the uninterrupted run's
for fam in cog wan; do
  if [ $fam = cog ]; then M=$COG; S="--num_inference_steps 4 --seed 7"; else M=$WAN; S="$WS --num_inference_steps 4"; fi
  d="$OUT/${fam}_resume"; mkdir -p "$d"
  eval "$BIN/stage1 $q $P --model_dir $M --output_dir $d"
  eval "$BIN/stage2 $q --model_dir $M $S --cache fbcache --cache_threshold 0.2 --input_dir $d --output_dir $d --checkpoint_every 1 --stop_after_steps 2"
  sha256sum "$d/stage2_checkpoint.safetensors" | sed "s|$OUT/||"
  eval "$BIN/stage2 $q --model_dir $M $S --cache fbcache --cache_threshold 0.2 --input_dir $d --output_dir $d --checkpoint_every 1 --resume"
done

# MPI: --cfg_parallel over 2 ranks (1 thread each)
if command -v mpirun >/dev/null 2>&1; then
  for fam in cog wan; do
    if [ $fam = cog ]; then M=$COG; S="--num_inference_steps 3 --seed 7"; else M=$WAN; S="$WS"; fi
    d="$OUT/${fam}_mpi"; mkdir -p "$d"
    eval "$BIN/stage1 $q $P --model_dir $M --output_dir $d"
    root=$([ "$(id -u)" = 0 ] && echo --allow-run-as-root || true)
    eval "OMP_NUM_THREADS=1 OMPI_MCA_btl_vader_single_copy_mechanism=none mpirun -q --oversubscribe $root -np 2 $BIN/stage2 --quiet --threads 1 --model_dir $M $S --cfg_parallel --input_dir $d --output_dir $d"
  done
fi

# the hashes (generation_config.json without the keys that name this host's paths or times)
cd "$OUT"
for f in $(find . -type f \( -name '*.safetensors' -o -name '*.mp4' -o -name '*.png' \) ! -name 'stage2_checkpoint.safetensors' ! -name frames.safetensors | sort); do
  sha256sum "$f"
done
for f in $(find . -name frames.safetensors | sort); do   # its metadata names the latents' path: the data only
  python3 -c "
import hashlib,struct,sys
b=open(sys.argv[1],'rb').read(); n=struct.unpack('<Q',b[:8])[0]
print(hashlib.sha256(b[8+n:]).hexdigest()+'  '+sys.argv[1]+' (tensor data)')" "$f"
done
for f in $(find . -name generation_config.json | sort); do
  python3 -c "
import json,sys,hashlib
d=json.load(open(sys.argv[1]))
for k in list(d):
    if k.endswith('_file') or k.endswith('seconds') or k in ('model_id','lora_file','loras'): d.pop(k)
print(hashlib.sha256(json.dumps(d,sort_keys=True).encode()).hexdigest()+'  '+sys.argv[1])" "$f"
done
