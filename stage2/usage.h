/* stage2 --help (included by main.c only; kept apart so main.c reads as flags + one call). */
#ifndef CVX_STAGE2_USAGE_H
#define CVX_STAGE2_USAGE_H

#include <stdio.h>

static void usage(FILE *f) {
    fprintf(f,
        "usage: stage2 [options]\n"
        "\n"
        "Denoise video latents from the text embeddings of stage1 with the CogVideoX transformer,\n"
        "as diffusers' CogVideoXPipeline does (seeded noise, classifier-free guidance, the\n"
        "CogVideoX DDIM or DPM scheduler).\n"
        "\n"
        "  --input_dir DIR             where stage1 wrote " EMBEDDINGS_FILE " and\n"
        "                              " GENCONFIG_FILE " (default " DEFAULT_DIR ")\n"
        "  --output_dir DIR            where to write (default: the input directory; created if needed)\n"
        "  --model_id ORG/NAME         hub id looked up in the local HuggingFace cache (nothing is\n"
        "                              downloaded); default: the model_id stage1 recorded\n"
        "  --model_dir DIR             a local diffusers model directory (transformer/, scheduler/)\n"
        "  --num_inference_steps N     denoising steps (default 50)\n"
        "  --guidance_scale G          classifier-free guidance scale (default 6; <= 1 disables CFG)\n"
        "  --use_dynamic_cfg           cosine schedule of the guidance scale (recommended with dpm)\n"
        "  --seed S                    noise seed, as torch.Generator('cpu').manual_seed(S) (default 42)\n"
        "  --height H, --width W       video size in pixels (default: the model's, 480x720 for\n"
        "                              CogVideoX-2b/5b, 768x1360 for CogVideoX1.5)\n"
        "  --frames F                  frames, 4k+1 (default: the model's, 49 or 81)\n"
        "  --fps N                     recorded for stage3 (default 8, 16 for CogVideoX1.5)\n"
        "  --scheduler ddim|dpm        override the scheduler class named in scheduler_config.json\n"
        "                              (the CogVideoX-5b/1.5 model cards use dpm)\n"
        "  --output_dtype f32|bf16     storage dtype of the latents (default f32)\n"
        "  --checkpoint_every K        save the loop state every K steps (default 1; 0 = never)\n"
        "  --resume                    continue from <output_dir>/" CHECKPOINT_FILE ";\n"
        "                              refused if it was written with other settings. The result is\n"
        "                              bit-identical to an uninterrupted run (same build and --threads)\n"
        "  --threads N                 threads (default: all cores)\n"
        "  --precision P               f32, bf16 or auto (default auto: bf16 when the CPU has AVX512_BF16\n"
        "                              or AMX, else f32; $CVX_PRECISION overrides auto). f32 is the\n"
        "                              golden-exact mode; bf16 = bf16 operands, f32 accumulation\n"
        "  --noise_dtype D             f32, bf16 or fp16: dtype of the torch.randn draws (initial latents,\n"
        "                              DPM noise); default: bf16 with --precision bf16, else f32 (as diffusers)\n"
        "  --quiet                     only errors and warnings\n"
        "  --verbose                   more detail\n"
        "  --help                      this text\n"
        "\n"
        "Debugging:\n"
        "  --stop_after_steps N        stop after N steps, leaving a checkpoint (tests resume)\n"
        "\n"
        "Output: <output_dir>/" LATENTS_FILE ": latents [1, C, T, H/8, W/8] (channels before\n"
        "frames; CogVideoX1.5's padding frame dropped), metadata num_frames, num_inference_steps,\n"
        "guidance_scale, seed, height, width, dtype_info. <output_dir>/" GENCONFIG_FILE " gets\n"
        "num_inference_steps, guidance_scale, seed, height, width, frames, fps, use_dynamic_cfg,\n"
        "scheduler and model_id (the model used); other keys are kept. The checkpoint is deleted\n"
        "once the latents are written.\n");
}

#endif
