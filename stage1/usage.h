/* stage1 --help (included by main.c only; kept apart so main.c reads as flags + one call). */
#ifndef CVX_STAGE1_USAGE_H
#define CVX_STAGE1_USAGE_H

#include <stdio.h>

static void usage(FILE *f) {
    fprintf(f,
        "usage: stage1 --prompt TEXT [options]\n"
        "       stage1 --prompts_file FILE [options]\n"
        "\n"
        "Encode a prompt and a negative prompt with the model's text encoder, as its diffusers\n"
        "pipeline does: CogVideoX: T5 v1.1, no attention mask, padded to max_sequence_length; Wan 2.1:\n"
        "prompt_clean (ftfy + html.unescape), UMT5 with the mask, rows past the prompt zeros.\n"
        "\n"
        "  --prompt TEXT               the prompt\n"
        "  --negative_prompt TEXT      the negative prompt (default: \"\")\n"
        "  --model_id ORG/NAME         hub id looked up in the local HuggingFace cache\n"
        "                              ($HF_HUB_CACHE, $HF_HOME/hub, ~/.cache/huggingface/hub;\n"
        "                              nothing is downloaded; default %s)\n"
        "  --model_dir DIR             a local diffusers model directory (tokenizer/, text_encoder/)\n"
        "  --output_dir DIR            where to write (default %s; created if needed)\n"
        "  --max_sequence_length N     tokens per prompt, padded/truncated (default: the model's,\n"
        "                              226 CogVideoX, 512 Wan)\n"
        "  --prompts_file FILE         encode every non-empty line of FILE as a prompt with one model\n"
        "                              load; line N is written to stage1_embeddings_NNNN.safetensors\n"
        "                              (N = line number in the file, 1-based, at least 4 digits)\n"
        "  --image PATH                image-to-video: the first frame (PNG, JPEG, ...), for an I2V\n"
        "                              model (CogVideoX-5b-I2V, CogVideoX1.5-5B-I2V, Wan2.1-I2V-14B)\n"
        "  --video PATH                video-to-video: a video file or a directory of frame images\n"
        "                              (sorted by name), for a text-to-video model\n"
        "  --frames N                  with --video: its first N frames, 4k+1 (default: the largest 4k+1\n"
        "                              count the video has, said in one line); Wan with\n"
        "                              --image: the video's frame count (default 81; the condition\n"
        "                              encodes the image followed by N-1 zero frames)\n"
        "  --vae FILE                  Wan: a single VAE file (wan_2.1_vae.safetensors) for --image/--video\n"
        "  --height H, --width W       the video size the image/video is resized to (Pillow LANCZOS\n"
        "                              when it differs; default the model's, as stage 2); stage 2\n"
        "                              takes the size (and V2V's frame count) from stage 1\n"
        "  --threads N                 threads (default: all cores)\n"
        "                              (under mpirun rank 0 encodes and writes, the others exit)\n"
        "  --precision P               f32, bf16 or auto (default auto: bf16 when the CPU has AVX512_BF16\n"
        "                              or AMX, else f32; $CVX_PRECISION overrides auto). f32 is the\n"
        "                              golden-exact mode; bf16 = bf16 operands, f32 accumulation\n"
        "  --text_encoder FILE         the text encoder's weights from one file instead of the model\n"
        "                              directory's (its config.json and tokenizer still come from there):\n"
        "                              .safetensors (HF names, or ComfyUI's umt5_xxl_*.safetensors) or GGUF\n"
        "                              (city96's t5-v1_1-xxl / umt5-xxl encoder files, llama.cpp names;\n"
        "                              quantized weights stay quantized in memory)\n"
        "  --int8                      GGUF-quantized weights: int8 dot products, the activations rounded\n"
        "                              to int8 per row as ggml does (faster with AVX512-VNNI; ~1e-3 off the\n"
        "                              default, which multiplies ggml-dequantized weight tiles exactly)\n"
        "  --quiet                     only errors and warnings\n"
        "  --verbose                   more detail\n"
        "  --help                      this text\n"
        "\n"
        "Output: <output_dir>/stage1_embeddings.safetensors with prompt_embeds and\n"
        "negative_prompt_embeds, each [1, L, d_model] float32, metadata prompt, negative_prompt,\n"
        "model_id, dtype_info; <output_dir>/generation_config.json gets prompt, negative_prompt and\n"
        "model_id (other keys are kept). With --prompts_file the prompt key is not set; the file\n"
        "gets prompts_file instead.\n"
        "With --image/--video: <output_dir>/stage1_conditioning.safetensors with the VAE encoder's\n"
        "latent_mean and latent_std [1, C, T, h, w] (stage 2 draws the sample with its --seed);\n"
        "generation_config.json gets mode (t2v, i2v, v2v), image or video, height, width. A run\n"
        "without them deletes an earlier stage1_conditioning.safetensors.\n",
        DEFAULT_MODEL_ID, DEFAULT_OUTPUT_DIR);
}

#endif
