/* stage3 --help (included by main.c only; kept apart so main.c reads as flags + one call). */
#ifndef CVX_STAGE3_USAGE_H
#define CVX_STAGE3_USAGE_H

#include <stdio.h>

static void usage(FILE *f) {
    fprintf(f,
        "usage: stage3 [options]\n"
        "\n"
        "Decode stage 2 latents with the model's VAE as its diffusers pipeline does (CogVideoX:\n"
        "latents x 1/scaling_factor, chunks of 2 latent frames with carried causal caches; Wan 2.1:\n"
        "latents un-normalised with latents_mean/std, one latent frame per decoder call) and write\n"
        "an MP4.\n"
        "\n"
        "  --input_dir DIR              where stage2_latents.safetensors and generation_config.json\n"
        "                               are (default %s)\n"
        "  --latents FILE               latents file (default <input_dir>/stage2_latents.safetensors);\n"
        "                               tensor 'latents' [B, C, T, H, W], F32, BF16 or F16\n"
        "  --output_video PATH          MP4 to write (default <input_dir>/output_video.mp4)\n"
        "  --fps N                      frames per second (default: generation_config.json 'fps',\n"
        "                               else the model's: 8 for CogVideoX, 16 for CogVideoX1.5 and Wan)\n",
        DEFAULT_INPUT_DIR);
    cvx_stage3_options_help(f, "fps");   /* the family options' lines (pipeline/family.c) */
    fprintf(f,
        "  --prompt_index N             a --prompts_file batch: stage2_latents_NNNN.safetensors and\n"
        "                               generation_config_NNNN.json in, output_video_NNNN.mp4 out\n"
        "  --model_id ORG/NAME          hub id looked up in the local HuggingFace cache (nothing is\n"
        "                               downloaded; default: generation_config.json 'model_id')\n"
        "  --model_dir DIR              a local diffusers model directory (vae/)\n"
        "  --tiling auto|on|off         spatial tiling: 'on' tiles whenever the latent is larger than\n"
        "                               one tile (upstream enable_tiling), 'off' never, 'auto'\n"
        "                               (default) only when an untiled decode would need > 6 GiB\n"
        "  --tile_sample_min_height H   tile height in pixels (default: vae sample_height / 2)\n"
        "  --tile_sample_min_width W    tile width in pixels (default: vae sample_width / 2); sizes whose\n"
        "                               tiles would stitch to another frame size are refused (multiples\n"
        "                               of 48 for the height, of 40 for the width fit; docs/usage.md)\n"
        "  --crf N                      H.264 quality, 0 (lossless) .. 51 (default 18)\n"
        "  --png_dir DIR                also write every frame as DIR/frame_NNNN.png (a new or empty\n"
        "                               directory: one holding files is refused, unless --overwrite)\n"
        "  --overwrite                  --png_dir may hold an earlier run's frames: replaced, and the\n"
        "                               frame_NNNN.png files past this run's frames removed\n"
        "  --contact_sheet FILE         also write a PNG with all frames in a grid\n"
        "  --output_frames FILE         also write the decoder output, tensor 'decoded'\n"
        "                               [B, 3, T, H, W] F32: the raw decoder output, before the\n"
        "                               post-processing's clamp (nominally [-1, 1], not bounded)\n"
        "  --threads N                  threads (default: all cores; per rank under mpirun)\n"
        "                               (under mpirun -np N the ranks share the tiles of a tiled decode,\n"
        "                               rank 0 blends and writes: same bytes as one process; an untiled\n"
        "                               decode runs on rank 0 alone)\n"
        "  --precision P                f32, bf16 or auto (default auto; $CVX_PRECISION overrides auto).\n"
        "                               For the VAE auto means f32: measured faster than bf16 today\n"
        "                               (Winograd F(4x4) in f32, F(2x2) in bf16). bf16 = bf16 operands,\n"
        "                               f32 accumulation\n"
        "  --vae FILE                   Wan: a single VAE file (ComfyUI's wan_2.1_vae.safetensors, original\n"
        "                               names) instead of the directory's vae/\n"
        "  --quiet                      only errors and warnings\n"
        "  --verbose                    more detail\n"
        "  --help                       this text\n"
        "\n"
        "Frames are post-processed as upstream: clamp(x/2 + 0.5, 0, 1), x255 rounded to 8 bits.\n"
        "Odd frame sizes are padded to even (last row/column repeated) for yuv420p. With B > 1 the\n"
        "sample i > 0 goes to <output_video stem>_<i>.mp4.\n");
}

#endif
