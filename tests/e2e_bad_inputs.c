/* Table-driven bad inputs for the three programs (issue 14): each case starts from a directory
 * holding the outputs of a good run (embeddings, generation_config.json, latents, video), makes
 * one thing wrong, runs one program, and asserts: exit status 1, exactly one "error:" line on
 * stderr holding the case's key words, no temp file left, and every file of the directory
 * byte-identical to before (a failed run never replaces or damages previous outputs).
 *
 * The run-directory behaviour outside the table (lock holder, stale temps, SIGTERM, re-runs)
 * is tested in tests/e2e_run_dir.c. The preparations (what each case breaks) are in
 * tests/bad_inputs_prep.h. */
#include "bad_inputs_prep.h"
#include "bad_inputs_reliab.h"

static int group_setup(void **state) {
    (void)state;
    return tu_good_run_make(&g_good);
}
static int group_teardown(void **state) {
    (void)state;
    tu_rmrf(g_good.dir);
    return 0;
}

/* ---- the state of a directory: every regular file's bytes ---- */
typedef struct {
    int n;
    char name[32][256];
    char *data[32];
    size_t len[32];
} snapshot;

static void snap(const char *dir, snapshot *s) {
    memset(s, 0, sizeof *s);
    DIR *d = opendir(dir);
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d));) {
        char p[512];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (lstat(p, &st) != 0 || !S_ISREG(st.st_mode) || !strcmp(e->d_name, ".lock")) continue;
        assert_true(s->n < 32);
        snprintf(s->name[s->n], sizeof s->name[0], "%s", e->d_name);
        s->data[s->n] = cvx_read_file(p, &s->len[s->n]);
        assert_non_null(s->data[s->n]);
        s->n++;
    }
    closedir(d);
}
static void snap_free(snapshot *s) {
    for (int i = 0; i < s->n; i++) free(s->data[i]);
}
/* "" when a and b hold the same files with the same bytes, else what differs (in why). */
static int snap_same(const snapshot *a, const snapshot *b, char *why, size_t n) {
    for (int i = 0; i < a->n; i++) {
        int j = 0;
        while (j < b->n && strcmp(a->name[i], b->name[j]) != 0) j++;
        if (j == b->n) return snprintf(why, n, "%s was removed", a->name[i]), 0;
        if (a->len[i] != b->len[j] || memcmp(a->data[i], b->data[j], a->len[i]) != 0)
            return snprintf(why, n, "%s changed", a->name[i]), 0;
    }
    for (int j = 0; j < b->n; j++) {
        int i = 0;
        while (i < a->n && strcmp(a->name[i], b->name[j]) != 0) i++;
        if (i == a->n) return snprintf(why, n, "new file %s left behind", b->name[j]), 0;
    }
    return 1;
}

typedef struct {
    const char *name;
    int stage;
    const char *args;   /* {D} case dir, {X} scratch dir, {M} golden model */
    prep_fn prep;
    const char *words[3];
} bad_case;

static const bad_case CASES[] = {
    /* ---- stage 1: command line ---- */
    {"s1 no prompt", 1, "", NULL, {"--prompt"}},
    {"s1 prompt and file", 1, "--prompt a --prompts_file {X}/p.txt", NULL, {"exactly one"}},
    {"s1 model_id and model_dir", 1, "--prompt a --model_id a/b", NULL, {"--model_id", "--model_dir"}},
    {"s1 max_len 0", 1, "--prompt a --max_sequence_length 0", NULL, {"--max_sequence_length", "0"}},
    {"s1 max_len text", 1, "--prompt a --max_sequence_length ten", NULL, {"--max_sequence_length", "ten"}},
    {"s1 max_len huge", 1, "--prompt a --max_sequence_length 99999999", NULL, {"--max_sequence_length"}},
    {"s1 threads negative", 1, "--prompt a --threads -1", NULL, {"--threads", "-1"}},
    {"s1 threads text", 1, "--prompt a --threads many", NULL, {"--threads", "many"}},
    {"s1 unknown option", 1, "--prompt a --bogus", NULL, {"--bogus"}},
    {"s1 stray argument", 1, "--prompt a stray", NULL, {"unexpected argument", "stray"}},
    {"s1 prompt missing value", 1, "--prompt", NULL, {"--prompt"}},
    {"s1 prompts_file missing", 1, "--prompts_file {X}/none.txt", NULL, {"none.txt"}},
    {"s1 output_dir is a file", 1, "--prompt a --output_dir {X}/afile", p_output_is_file, {"afile"}},
    /* ---- stage 1: model ---- */
    {"s1 model_dir missing", 1, "--prompt a --model_dir {X}/nomodel", NULL, {"nomodel"}},
    {"s1 no tokenizer", 1, "--prompt a --model_dir {X}/model", p_model_no_tokenizer, {"tokenizer"}},
    {"s1 corrupt spiece.model", 1, "--prompt a --model_dir {X}/model", p_model_bad_spiece, {"spiece.model"}},
    {"s1 corrupt T5 config", 1, "--prompt a --model_dir {X}/model", p_model_bad_t5_config, {"text_encoder/config.json"}},
    {"s1 T5 config missing d_model", 1, "--prompt a --model_dir {X}/model", p_model_t5_missing_key, {"config.json", "d_model"}},
    {"s1 truncated T5 weights", 1, "--prompt a --model_dir {X}/model", p_model_trunc_t5, {"model.safetensors"}},
    /* ---- stage 2: command line ---- */
    {"s2 steps 0", 2, "--num_inference_steps 0", NULL, {"--num_inference_steps"}},
    {"s2 steps text", 2, "--num_inference_steps x", NULL, {"--num_inference_steps"}},
    {"s2 guidance negative", 2, "--guidance_scale -1", NULL, {"--guidance_scale"}},
    {"s2 guidance nan", 2, "--guidance_scale nan", NULL, {"--guidance_scale"}},
    {"s2 frames not 4k+1", 2, "--frames 10", NULL, {"--frames", "10"}},
    {"s2 height not multiple", 2, "--height 50", NULL, {"--height", "50"}},
    {"s2 width zero", 2, "--width 0", NULL, {"--width"}},
    {"s2 unknown scheduler", 2, "--scheduler euler", NULL, {"--scheduler", "euler"}},
    {"s2 bad output dtype", 2, "--output_dtype f16", NULL, {"--output_dtype", "f16"}},
    {"s2 seed text", 2, "--seed abc", NULL, {"--seed", "abc"}},
    {"s2 checkpoint_every negative", 2, "--checkpoint_every -2", NULL, {"--checkpoint_every"}},
    {"s2 fps zero", 2, "--fps 0", NULL, {"--fps"}},
    {"s2 unknown option", 2, "--bogus 1", NULL, {"--bogus"}},
    /* ---- stage 2: inputs ---- */
    {"s2 no embeddings", 2, "", p_no_embeddings, {"stage1_embeddings.safetensors"}},
    {"s2 truncated embeddings", 2, "", p_trunc_embeddings, {"stage1_embeddings.safetensors"}},
    {"s2 garbage embeddings", 2, "", p_garbage_embeddings, {"stage1_embeddings.safetensors"}},
    {"s2 embeddings tensor missing", 2, "", p_renamed_tensor, {"prompt_embeds"}},
    {"s2 embeddings wrong width", 2, "", p_wrong_embed_dim, {"prompt_embeds"}},
    {"s2 input_dir missing", 2, "--input_dir {X}/nothing", NULL, {"nothing"}},
    {"s2 truncated transformer", 2, "--model_dir {X}/model", p_model_trunc_transformer, {"diffusion_pytorch_model.safetensors"}},
    {"s2 transformer config not object", 2, "--model_dir {X}/model", p_model_bad_transformer_config, {"transformer/config.json"}},
    {"s2 unknown scheduler class", 2, "--model_dir {X}/model", p_model_bad_scheduler, {"EulerDiscreteScheduler"}},
    {"s2 resume without checkpoint", 2, "--resume", NULL, {"--resume", "checkpoint"}},
    {"s2 resume other settings", 2, "--resume", p_checkpoint_other_seed, {"--resume", "seed"}},
    {"s2 resume garbage checkpoint", 2, "--resume", p_checkpoint_garbage, {"stage2_checkpoint.safetensors"}},
    {"s2 resume checkpoint with a flipped bit", 2, "--resume", p_checkpoint_flipped_bit,
     {"stage2_checkpoint.safetensors", "changed or damaged", "content_xxh64"}},
    {"s2 resume checkpoint at the last step", 2, "--resume", p_checkpoint_step_total,
     {"stage2_checkpoint.safetensors", "step 2", "out of range 1..1"}},
    {"s2 resume v1 checkpoint", 2, "--resume", p_checkpoint_v1, {"checkpoint v1", "older build"}},
    {"s2 resume crafted generator 624/624", 2, "--resume", p_checkpoint_bad_generator,
     {"stage2_checkpoint.safetensors", "generator", "next 624, left 624"}},
    /* ---- stage 3 ---- */
    {"s3 latents missing", 3, "--latents {X}/none.safetensors", NULL, {"none.safetensors"}},
    {"s3 truncated latents", 3, "", p_trunc_latents, {"stage2_latents.safetensors"}},
    {"s3 latents rank 4", 3, "", p_latents_rank4, {"latents"}},
    {"s3 latents wrong channels", 3, "", p_latents_channels, {"latents"}},
    {"s3 latents integer dtype", 3, "", p_latents_i64, {"latents"}},
    {"s3 fps zero", 3, "--fps 0", NULL, {"--fps"}},
    {"s3 crf too high", 3, "--crf 99", NULL, {"--crf"}},
    {"s3 bad tiling", 3, "--tiling maybe", NULL, {"--tiling", "maybe"}},
    {"s3 tile height zero", 3, "--tile_sample_min_height 0", NULL, {"--tile_sample_min_height"}},
    /* issue 21: tile sizes whose stitching gives another frame size (upstream's 56x68 for 48x64) */
    {"s3 tiles that change the height", 3, "--tiling on --tile_sample_min_height 24 --tile_sample_min_width 32", NULL,
     {"--tile_sample_min_height 24", "56 pixels high, not 48", "fit"}},
    {"s3 tiles that change the width", 3, "--tiling on --tile_sample_min_width 24", NULL,
     {"--tile_sample_min_width 24", "wide, not 64"}},
    {"s3 tile height 17", 3, "--tiling on --tile_sample_min_height 17 --tile_sample_min_width 17", NULL,
     {"--tile_sample_min_height 17", "not 48"}},
    {"s3 no vae", 3, "--model_dir {X}/model", p_model_no_vae, {"vae"}},
    {"s3 bad vae config", 3, "--model_dir {X}/model", p_model_bad_vae_config, {"vae/config.json", "block_out_channels"}},
    {"s3 truncated vae", 3, "--model_dir {X}/model", p_model_trunc_vae, {"diffusion_pytorch_model.safetensors"}},
    {"s3 --png_dir is a file", 3, "--png_dir {X}/afile", p_output_is_file, {"afile", "not a directory", "PNG"}},
    {"s3 --png_dir under a file", 3, "--png_dir {X}/afile/frames", p_output_is_file, {"afile", "not a directory"}},
    {"s3 output dir missing", 3, "--output_video {X}/no/such/dir/v.mp4", NULL, {"v.mp4"}},
    {"s3 unknown option", 3, "--bogus", NULL, {"--bogus"}},

    /* ---- issue 14, with the wiring: stage 1 ---- */
    {"s1 prompts file whitespace only", 1, "--prompts_file {X}/p.txt", p_s1_whitespace_file, {"p.txt", "whitespace"}},
    {"s1 prompts file bad UTF-8 line", 1, "--prompts_file {X}/p.txt", p_s1_bad_utf8_line, {"p.txt line 2", "UTF-8"}},
    {"s1 prompts file control char", 1, "--prompts_file {X}/p.txt", p_s1_control_line, {"p.txt line 1", "control"}},
    {"s1 prompts file NUL byte", 1, "--prompts_file {X}/p.txt", p_s1_nul_line, {"p.txt line 2", "NUL"}},
    {"s1 --prompt --threads 1", 1, "--prompt --threads 1", NULL, {"--prompt needs a value", "--threads"}},
    {"s1 prompt invalid UTF-8", 1, "--prompt \"$(printf 'a\\377b')\"", NULL, {"--prompt", "UTF-8"}},
    {"s1 prompt whitespace only", 1, "--prompt '  \t '", NULL, {"--prompt", "whitespace"}},
    {"s1 negative prompt invalid UTF-8", 1, "--prompt a --negative_prompt \"$(printf '\\300\\200')\"", NULL,
     {"--negative_prompt", "UTF-8"}},
    {"s1 corrupt genconfig", 1, "--prompt a", p_corrupt_genconfig, {"generation_config.json"}},
    {"s1 genconfig fps -8", 1, "--prompt a", p_genconfig_fps, {"generation_config.json", "fps", "-8"}},
    {"s1 T5 num_layers 1e9", 1, "--prompt a --model_dir {X}/model", p_t5_layers, {"config.json", "num_layers", "1000000000"}},
    {"s1 directory locked", 1, "--prompt a", p_lock, {"in use by another run", "pid"}},
    {"s1 NaN from the VAE encoder (I2V)", 1, "--prompt a --model_dir {X}/model --image {X}/image.png", p_i2v_nan_encoder,
     {"image.png", "latent_mean", "nan"}},
    {"s1 --video /dev/zero", 1, "--prompt a --video /dev/zero --height 48 --width 64", NULL,
     {"/dev/zero", "not a regular file", "device"}},
    {"s1 --video a FIFO", 1, "--prompt a --video {X}/fifo --height 48 --width 64", p_fifo, {"fifo", "FIFO"}},
    {"s1 --video a symlink loop", 1, "--prompt a --video {X}/loop_a --height 48 --width 64", p_symlink_loop,
     {"loop_a", "loop of symbolic links"}},
    {"s1 --image a directory", 1, "--prompt a --model_dir {X}/model --image {X}/images", p_i2v_model,
     {"images", "a directory", "--image one file"}},
    {"s1 --image of 16000x16000 pixels", 1, "--prompt a --model_dir {X}/model --image {X}/big.png", p_huge_png,
     {"big.png", "16000x16000", "input limit"}},
    {"s1 --prompts_file a directory", 1, "--prompts_file {X}", NULL, {"a directory, not a file"}},
    {"s1 --prompts_file a FIFO", 1, "--prompts_file {X}/fifo", p_fifo, {"fifo", "a FIFO, not a file"}},
    {"s1 genconfig is a directory", 1, "--prompt a", p_genconfig_dir, {"generation_config.json", "a directory"}},
    {"s1 --video, model without transformer", 1,
     "--prompt a --model_dir {X}/model --video " GOLDEN "/e2e_v2v_5b/video", p_model_no_transformer,
     {"--video", "transformer", "missing"}},
    /* ---- stage 2 ---- */
    {"s2 embeddings empty (hash recorded)", 2, "", p_empty_embeddings, {"stage1_embeddings.safetensors", "0 bytes"}},
    {"s2 embeddings truncated (hash recorded)", 2, "", p_trunc_embeddings_hashed,
     {"stage1_embeddings.safetensors", "truncated"}},
    {"s2 genconfig is a directory", 2, "", p_genconfig_dir, {"generation_config.json", "a directory"}},
    {"s2 NaN in prompt_embeds", 2, "", p_nan_embeddings, {"prompt_embeds", "nan", "index 5"}},
    {"s2 -Inf in negative_prompt_embeds", 2, "", p_inf_negative, {"negative_prompt_embeds", "inf", "index 77"}},
    {"s2 NaN in a weight (step named)", 2, "--model_dir {X}/model", p_nan_weight, {"step 1/2", "latents", "diverged"}},
    /* issue 37: a weight changed in place after the checkpoint (here a NaN: resumed, step 2 diverged)
     * is refused at --resume, by the weights' identity; the checkpoint stays */
    {"s2 model changed in place since the checkpoint", 2, "--model_dir {X}/model --resume", p_nan_weight_resume,
     {"--resume: the transformer weights changed since", "content xxh64", "mix two models"}},
    {"s2 NaN in a weight, checkpoint every step", 2, "--model_dir {X}/model --checkpoint_every 1", p_nan_weight,
     {"step 1/2", "diverged"}},
    {"s2 resume checkpoint with NaN latents", 2, "--resume", p_checkpoint_nan,
     {"stage2_checkpoint.safetensors", "latents", "index 9"}},
    {"s2 corrupt output genconfig", 2, "--output_dir {X}/out", p_out_genconfig_corrupt, {"out/generation_config.json"}},
    {"s2 corrupt input genconfig", 2, "", p_corrupt_genconfig, {"generation_config.json"}},
    {"s2 genconfig fps -8", 2, "", p_genconfig_fps, {"generation_config.json", "fps", "-8"}},
    {"s2 embeddings hash mismatch", 2, "", p_embeddings_other, {"stage1_embeddings.safetensors", "does not belong"}},
    {"s2 transformer num_layers 1e9", 2, "--model_dir {X}/model", p_transformer_layers, {"transformer/config.json", "num_layers"}},
    {"s2 transformer heads 0", 2, "--model_dir {X}/model", p_transformer_heads_zero, {"num_attention_heads", "0"}},
    {"s2 --transformer qweight bytes", 2, "--transformer {X}/mz.safetensors", p_mz_bytes,
     {"mz.safetensors", "ff.net.2.Q4_0_qweight' has shape [48, 90] U8 (4320 bytes)", "expected [48, 108] U8 (5184"}},
    {"s2 --transformer qweight K 48", 2, "--transformer {X}/mz.safetensors", p_mz_k48,
     {"to_q.Q4_0_qweight", "[48, 48] has 48 columns", "not a multiple of the 32-value Q4_0 block"}},
    {"s2 directory locked", 2, "", p_lock, {"in use by another run", "pid"}},
    {"s2 conditioning file a T2V config does not list", 2, "", p_v2v_file_in_t2v,
     {"stage1_conditioning.safetensors", "not listed", "mode \"t2v\""}},
    {"s2 genconfig mode banana", 2, "", p_mode_banana, {"generation_config.json", "\"banana\"", "t2v"}},
    {"s2 config mode i2v, file v2v", 2, "", p_mode_i2v_v2v_file, {"holds a v2v conditioning", "mode \"i2v\""}},
    {"s2 input directory locked", 2, "--output_dir {X}/out", p_lock_input, {"in use by another run", "pid"}},
    {"s2 --seed --threads 1", 2, "--seed --threads 1", NULL, {"--seed needs a value", "--threads"}},
    /* ---- stage 3 ---- */
    {"s3 Inf in latents", 3, "", p_inf_latents, {"latents", "inf", "index 3"}},
    {"s3 NaN in latents", 3, "", p_nan_latents, {"latents", "nan", "index 100"}},
    {"s3 NaN decoded (VAE weight)", 3, "--model_dir {X}/model", p_nan_vae_weight, {"decoded", "nan"}},
    {"s3 scaling_factor 0", 3, "--model_dir {X}/model", p_vae_scaling_zero, {"vae/config.json", "scaling_factor"}},
    {"s3 vae layers_per_block 1e9", 3, "--model_dir {X}/model", p_vae_layers, {"vae/config.json", "layers_per_block"}},
    {"s3 genconfig fps -8", 3, "", p_genconfig_fps, {"generation_config.json", "fps", "-8"}},
    {"s3 genconfig prompt not UTF-8", 3, "", p_genconfig_bad_utf8, {"generation_config.json", "prompt", "UTF-8"}},
    {"s3 genconfig malformed hash", 3, "", p_genconfig_bad_hash, {"stage2_latents_xxh64"}},
    {"s3 corrupt genconfig", 3, "", p_corrupt_genconfig, {"generation_config.json"}},
    {"s3 latents hash mismatch", 3, "", p_latents_other, {"stage2_latents.safetensors", "does not belong"}},
    {"s3 latents older than a stage-1 re-run", 3, "", p_s1_rerun,
     {"stage2_latents.safetensors", "does not belong", "run stage 2 again"}},
    {"s2 embeddings older than a prompts-file run", 2, "", p_s1_rerun_prompts_file,
     {"stage1_embeddings.safetensors", "does not belong", "run stage 1 again"}},
    {"s3 directory locked", 3, "", p_lock, {"in use by another run", "pid"}},
    {"s3 genconfig is a directory", 3, "", p_genconfig_dir, {"generation_config.json", "a directory"}},
    {"s3 --latents --fps 8", 3, "--latents --fps 8", NULL, {"--latents needs a value", "--fps"}},

    /* ---- issue 37 ---- */
    /* NaN through every attention kernel: the step is named, as for a NaN after the attention */
    {"s2 NaN in to_q, f32 attention", 2, "--model_dir {X}/model --precision f32 --attention f32 --height 112 --width 96", p_nan_to_q,
     {"step 1/2", "diverged", "latents"}},
    {"s2 NaN in to_q, bf16", 2, "--model_dir {X}/model --precision bf16", p_nan_to_q, {"step 1/2", "diverged"}},
    {"s2 NaN in to_q, int8 attention", 2, "--model_dir {X}/model --attention int8", p_nan_to_q, {"step 1/2", "diverged"}},
    /* --lora weights that are not finite numbers, a directory */
    {"s2 --lora FILE:abc", 2, "--lora {X}/l.safetensors:abc", p_lora_file, {"l.safetensors:abc", "'abc'", "not a finite number"}},
    {"s2 --lora FILE:nan", 2, "--lora {X}/l.safetensors:nan", p_lora_file, {"'nan'", "not a finite number"}},
    {"s2 --lora FILE:1e400", 2, "--lora {X}/l.safetensors:1e400", p_lora_file, {"'1e400'", "not a finite number"}},
    {"s2 --lora FILE:1,5", 2, "--lora {X}/l.safetensors:1,5", p_lora_file, {"'1,5'", "not a finite number"}},
    {"s2 --lora FILE:", 2, "--lora {X}/l.safetensors:", p_lora_file, {"''", "not a finite number"}},
    {"s2 --lora a directory", 2, "--lora {X}:0.5", NULL, {"is a directory", "LoRA .safetensors file"}},
    /* outputs that are not regular files: refused, never replaced */
    {"s3 --output_video a symlink", 3, "--output_video {X}/v.mp4", p_out_symlink, {"v.mp4", "a symbolic link, not a regular file"}},
    {"s3 --output_video a FIFO", 3, "--output_video {X}/fifo", p_fifo, {"fifo", "a FIFO, not a regular file"}},
    {"s3 --output_video a device", 3, "--output_video {X}/null", p_chardev, {"null", "not a regular file"}},
    {"s3 --contact_sheet a symlink", 3, "--output_video {X}/new.mp4 --contact_sheet {X}/v.mp4", p_out_symlink,
     {"v.mp4", "a symbolic link, not a regular file"}},
    {"s3 --output_frames a FIFO", 3, "--output_video {X}/new.mp4 --output_frames {X}/fifo", p_fifo,
     {"fifo", "a FIFO, not a regular file"}},
    {"s2 output latents a symlink", 2, "--output_dir {X}/out", p_out_latents_link,
     {"stage2_latents.safetensors", "a symbolic link, not a regular file"}},
    {"s2 checkpoint a symlink", 2, "--output_dir {X}/out --stop_after_steps 1", p_out_checkpoint_link,
     {"stage2_checkpoint.safetensors", "a symbolic link, not a regular file"}},
    {"s1 output embeddings a symlink", 1, "--prompt a --output_dir {X}/out", p_out_embeddings_link,
     {"stage1_embeddings.safetensors", "a symbolic link, not a regular file"}},
    /* FIFOs as inputs: one line at once, no hang (the runs have a time limit) */
    {"s2 --transformer a FIFO", 2, "--transformer {X}/fifo", p_fifo, {"fifo", "a FIFO, not a file"}},
    {"s2 transformer weights a FIFO", 2, "--model_dir {X}/model", p_model_fifo_transformer,
     {"diffusion_pytorch_model.safetensors", "a FIFO, not a file"}},
    {"s2 --lora a FIFO", 2, "--lora {X}/fifo", p_fifo, {"fifo", "a FIFO, not a file"}},
    {"s3 VAE weights a FIFO", 3, "--model_dir {X}/model", p_model_fifo_vae, {"diffusion_pytorch_model.safetensors", "a FIFO"}},
    /* messages that misled: each names what is wrong and what was expected */
    {"s2 resume --attention f32 vs the precision's own", 2, "--resume --precision bf16 --attention f32", p_checkpoint_bf16,
     {"--resume", "no attention setting (its default)", "attention=f32"}},
    {"s2 a GGUF as --lora", 2, "--lora {X}/l.gguf", p_gguf_as_lora, {"l.gguf", "a GGUF file", ".safetensors"}},
    {"s2 --transformer .gguf, bad magic", 2, "--transformer {X}/t.gguf", p_gguf_bad_magic,
     {"t.gguf", "not a GGUF file", "expected 'GGUF'"}},
    {"s2 --transformer .gguf, empty", 2, "--transformer {X}/t.gguf", p_gguf_empty, {"t.gguf", "too short for a GGUF header"}},
    {"s2 --transformer .Q5_1_qweight", 2, "--transformer {X}/mz.safetensors", p_mz_q5_1,
     {"to_q.Q5_1_qweight", "not supported", "Q4_0_qweight"}},
    {"s2 --transformer a Wan GGUF", 2, "--transformer {X}/wan.gguf", p_wan_gguf,
     {"wan.gguf", "general.architecture is 'wan', expected 'cogvideox'", "not a CogVideoX transformer"}},
    {"s2 --transformer GGUF of architecture w@n", 2, "--transformer {X}/wan.gguf", p_garbage_arch_gguf,
     {"general.architecture is 'w@n'", "expected 'cogvideox'"}},
    /* a reused --png_dir */
    {"s3 --png_dir not empty", 3, "--output_video {X}/new.mp4 --png_dir {X}/png", p_png_dir_used,
     {"png: --png_dir is not empty", "frame_0030.png", "--overwrite"}},
};

static void expand(char *out, size_t n, const char *tmpl, const char *D, const char *X) {
    size_t k = 0;
    for (const char *p = tmpl; *p && k + 1 < n;) {
        const char *rep = NULL;
        if (!strncmp(p, "{D}", 3)) rep = D;
        else if (!strncmp(p, "{X}", 3)) rep = X;
        else if (!strncmp(p, "{M}", 3)) rep = g_good.model;
        if (rep) {
            k += (size_t)snprintf(out + k, n - k, "%s", rep);
            p += 3;
        } else {
            out[k++] = *p++;
        }
    }
    out[k < n ? k : n - 1] = 0;
}

/* Run one case; 0, or 1 with the reason in why. */
static int run_bad_case(const bad_case *c, char *why, size_t wn) {
    char D[64], X[64], cmd[16384], args[4096], err[16384], diff[512];
    tu_mkdtemp(D, sizeof D);
    tu_mkdtemp(X, sizeof X);
    snprintf(cmd, sizeof cmd, "cp -p '%s'/* '%s'/", g_good.dir, D);
    tu_run_ok(cmd);
    if (c->prep) c->prep(D, X);
    snapshot before, after;
    snap(D, &before);
    expand(args, sizeof args, c->args, D, X);
    if (c->stage == 1)
        snprintf(cmd, sizeof cmd, "%s --quiet --model_dir %s --output_dir %s %s", g_good.s1, g_good.model, D, args);
    else if (c->stage == 2)
        snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --model_dir %s " TU_STAGE2_SMALL " %s", g_good.s2, D, g_good.model, args);
    else
        snprintf(cmd, sizeof cmd, "%s --quiet --input_dir %s --model_dir %s %s", g_good.s3, D, g_good.model, args);
    /* a time limit: an input that blocks (a FIFO) fails the case instead of hanging the suite */
    char limited[sizeof cmd + 32];
    snprintf(limited, sizeof limited, "timeout -s KILL 300 %s", cmd);
    int rc = tu_run(limited, err, sizeof err), bad = 1;
    cvx_dir_lock_release(g_held);
    g_held = NULL;
    snap(D, &after);
    if (rc != 1)
        snprintf(why, wn, "exit %d, expected 1: %.300s", rc, err);
    else if (tu_count_substr(err, "error:") != 1)
        snprintf(why, wn, "expected one error line, got: %.300s", err);
    else if (!snap_same(&before, &after, diff, sizeof diff))
        snprintf(why, wn, "previous outputs not kept: %s", diff);
    else
        bad = 0;
    for (int i = 0; !bad && i < 3 && c->words[i]; i++)
        if (!strstr(err, c->words[i])) bad = 1, snprintf(why, wn, "error lacks '%s': %.300s", c->words[i], err);
    DIR *d = opendir(D);
    for (struct dirent *e; !bad && (e = readdir(d));)
        if (strstr(e->d_name, ".tmp.")) bad = 1, snprintf(why, wn, "temp file %s left behind", e->d_name);
    closedir(d);
    if (!bad) print_message("  ok   %-36s %s", c->name, strstr(err, "error:"));
    snap_free(&before);
    snap_free(&after);
    tu_rmrf(D);
    tu_rmrf(X);
    return bad;
}

static void test_bad_inputs(void **state) {
    (void)state;
    const size_t n = sizeof CASES / sizeof CASES[0];
    assert_true(n >= 40);
    const char *only = getenv("BAD_CASE");   /* BAD_CASE="s2 fps" runs the cases whose name starts so */
    int failed = 0;
    for (size_t i = 0; i < n; i++) {
        if (only && strncmp(CASES[i].name, only, strlen(only)) != 0) continue;
        char why[1024];
        if (run_bad_case(&CASES[i], why, sizeof why)) {
            print_message("  FAIL %-36s %s\n", CASES[i].name, why);
            failed++;
        }
    }
    if (failed) fail_msg("%d of %zu bad-input cases failed (listed above)", failed, n);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_bad_inputs)};
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
