/* stage2: text embeddings -> denoised video latents (CogVideoXPipeline's denoising loop).
 *
 *   stage2 [--input_dir DIR] [--output_dir DIR] [--num_inference_steps N] [--guidance_scale G]
 *          [--use_dynamic_cfg] [--seed S] [--height H] [--width W] [--frames F] [--fps N]
 *          [--model_id ID | --model_dir DIR] [--scheduler ddim|dpm] [--threads N] [--resume]
 *          [--checkpoint_every K] [--output_dtype f32|bf16] [--quiet] [--verbose] [--help]
 *
 * Reads <input_dir>/stage1_embeddings.safetensors (+ generation_config.json for the model id),
 * writes <output_dir>/stage2_latents.safetensors and extends <output_dir>/generation_config.json.
 * The loop state is checkpointed to <output_dir>/stage2_checkpoint.safetensors (see --help). */
#include <errno.h>
#include <getopt.h>
#include <json-c/json.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "cli.h"
#include "error.h"
#include "fileio.h"
#include "gemm.h"
#include "model.h"
#include "progress.h"
#include "safetensors.h"
#include "stage2/sampler.h"
#include "stage2/scheduler.h"
#include "stage2/transformer.h"

#define DEFAULT_DIR "stage_outputs"
#define EMBEDDINGS_FILE "stage1_embeddings.safetensors"
#define LATENTS_FILE "stage2_latents.safetensors"
#define CHECKPOINT_FILE "stage2_checkpoint.safetensors"
#define GENCONFIG_FILE "generation_config.json"

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

/* Shortest decimal that reads back as the same double, with ".0" on integers (as Python's repr). */
static void format_double(double v, char *buf, size_t n) {
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, n, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    if (!strpbrk(buf, ".eni")) strncat(buf, ".0", n - strlen(buf) - 1);
}

/* FNV-1a 64 of a file's bytes: identifies the embeddings in the checkpoint fingerprint. */
static int hash_file(const char *path, uint64_t *out) {
    size_t len;
    char *buf = cvx_read_file(path, &len);
    if (!buf) return -1;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)buf[i]) * 0x100000001b3ull;
    free(buf);
    *out = h;
    return 0;
}

/* VAE scale factors as the pipeline derives them (8 and 4 when there is no vae/config.json). */
static void vae_scales(const char *model_dir, int *spatial, int *temporal) {
    char path[4200];
    cvx_config vc;
    *spatial = 8;
    *temporal = 4;
    snprintf(path, sizeof path, "%s/vae/config.json", model_dir);
    if (!cvx_is_file(path)) return;
    if (cvx_config_load(&vc, path)) cvx_die_last_error();
    int64_t boc[16], tcr;
    int nb;
    if (cvx_cfg_has(&vc, "block_out_channels")) {
        if (cvx_cfg_int_array(&vc, "block_out_channels", boc, 16, &nb)) cvx_die_last_error();
        if (nb < 1) cvx_die("%s: key 'block_out_channels' is empty", path);
        *spatial = 1 << (nb - 1);
    }
    if (cvx_cfg_int_or(&vc, "temporal_compression_ratio", 4, &tcr)) cvx_die_last_error();
    if (tcr < 1 || tcr > 64) cvx_die("%s: key 'temporal_compression_ratio' is %lld, expected 1..64", path, (long long)tcr);
    *temporal = (int)tcr;
    cvx_config_free(&vc);
}

static void write_latents(const char *path, const float *lat, const int64_t shape[5], cvx_dtype dtype,
                          const cogvideox_sample_params *p, const char *scheduler, const char *model_id) {
    cvx_st_writer *w = cvx_stw_new();
    char buf[64];
    int rc = cvx_stw_add_f32(w, "latents", dtype, 5, shape, lat);
    snprintf(buf, sizeof buf, "%d", p->frames);
    rc |= cvx_stw_metadata(w, "num_frames", buf);
    snprintf(buf, sizeof buf, "%d", p->num_inference_steps);
    rc |= cvx_stw_metadata(w, "num_inference_steps", buf);
    format_double(p->guidance_scale, buf, sizeof buf);
    rc |= cvx_stw_metadata(w, "guidance_scale", buf);
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)p->seed);
    rc |= cvx_stw_metadata(w, "seed", buf);
    snprintf(buf, sizeof buf, "%d", p->height);
    rc |= cvx_stw_metadata(w, "height", buf);
    snprintf(buf, sizeof buf, "%d", p->width);
    rc |= cvx_stw_metadata(w, "width", buf);
    rc |= cvx_stw_metadata(w, "dtype_info", dtype == CVX_BF16 ? "{\"latents\": \"bfloat16\"}" : "{\"latents\": \"float32\"}");
    rc |= cvx_stw_metadata(w, "use_dynamic_cfg", p->use_dynamic_cfg ? "true" : "false");
    rc |= cvx_stw_metadata(w, "scheduler", scheduler);
    rc |= cvx_stw_metadata(w, "model_id", model_id);
    if (rc || cvx_stw_write(w, path)) cvx_die_last_error();
    cvx_stw_free(w);
}

/* stage2_latents.safetensors, generation_config.json, then the stale checkpoint goes. */
static void write_outputs(const cogvideox_sample_params *p, const cogvideox_latent_shape *sh, const float *latents,
                          cvx_dtype out_dtype, const cogvideox_scheduler *sched, const char *model_name, int fps,
                          const char *lat_path, const char *in_gc, const char *out_gc, const char *ckpt_path) {
    const int T = sh->frames - sh->pad_frames;
    const int64_t oshape[5] = {1, sh->channels, T, sh->height, sh->width};
    float *out = cvx_alloc_f32((size_t)sh->channels * T * sh->height * sh->width);   // [1, C, T, h, w]
    cogvideox_latents_to_output(latents, sh, out);
    const char *sched_name = sched->type->name;
    write_latents(lat_path, out, oshape, out_dtype, p, sched_name, model_name);
    free(out);

    cvx_config gc;
    json_object *upd = json_object_new_object();
    if (!cvx_is_file(out_gc) && cvx_is_file(in_gc)) {  /* new output dir: carry stage1's keys over */
        if (cvx_config_load(&gc, in_gc)) cvx_die_last_error();
        json_object_object_foreach(gc.root, key, val) json_object_object_add(upd, key, json_object_get(val));
        cvx_config_free(&gc);
    }
    /* the model that made these latents (stage3 decodes with its VAE; T5 is shared by all) */
    json_object_object_add(upd, "model_id", json_object_new_string(model_name));
    json_object_object_add(upd, "num_inference_steps", json_object_new_int(p->num_inference_steps));
    json_object_object_add(upd, "guidance_scale", json_object_new_double(p->guidance_scale));
    json_object_object_add(upd, "seed", json_object_new_uint64(p->seed));
    json_object_object_add(upd, "height", json_object_new_int(p->height));
    json_object_object_add(upd, "width", json_object_new_int(p->width));
    json_object_object_add(upd, "frames", json_object_new_int(p->frames));
    json_object_object_add(upd, "fps", json_object_new_int(fps));
    json_object_object_add(upd, "use_dynamic_cfg", json_object_new_boolean(p->use_dynamic_cfg));
    json_object_object_add(upd, "scheduler", json_object_new_string(sched_name));
    if (cvx_genconfig_update(out_gc, upd)) cvx_die_last_error();
    json_object_put(upd);
    /* the checkpoint is stale now that the result is written */
    if (cvx_is_file(ckpt_path) && unlink(ckpt_path) != 0) cvx_warn("%s: could not delete: %s", ckpt_path, strerror(errno));
}

int main(int argc, char **argv) {
    cvx_set_program_name("stage2");
    const char *input_dir = DEFAULT_DIR, *output_dir = NULL, *model_id = NULL, *model_dir_arg = NULL;
    const char *scheduler_arg = NULL;
    int steps = 50, dynamic_cfg = 0, height = 0, width = 0, frames = 0, fps = 0, threads = 0, verbosity = 1;
    int resume = 0, checkpoint_every = 1, stop_after = 0;
    double guidance = 6.0;
    unsigned long long seed = 42;
    cvx_dtype out_dtype = CVX_F32;
    enum { O_IN = 256, O_OUT, O_STEPS, O_GUIDE, O_DYN, O_SEED, O_H, O_W, O_F, O_FPS, O_MODEL_ID, O_MODEL_DIR,
           O_SCHED, O_THREADS, O_RESUME, O_CKPT, O_DTYPE, O_QUIET, O_VERBOSE, O_STOP };
    static const struct option opts[] = {
        {"input_dir", required_argument, 0, O_IN},         {"output_dir", required_argument, 0, O_OUT},
        {"num_inference_steps", required_argument, 0, O_STEPS}, {"guidance_scale", required_argument, 0, O_GUIDE},
        {"use_dynamic_cfg", no_argument, 0, O_DYN},        {"seed", required_argument, 0, O_SEED},
        {"height", required_argument, 0, O_H},             {"width", required_argument, 0, O_W},
        {"frames", required_argument, 0, O_F},             {"fps", required_argument, 0, O_FPS},
        {"model_id", required_argument, 0, O_MODEL_ID},    {"model_dir", required_argument, 0, O_MODEL_DIR},
        {"scheduler", required_argument, 0, O_SCHED},      {"threads", required_argument, 0, O_THREADS},
        {"resume", no_argument, 0, O_RESUME},              {"checkpoint_every", required_argument, 0, O_CKPT},
        {"output_dtype", required_argument, 0, O_DTYPE},   {"quiet", no_argument, 0, O_QUIET},
        {"verbose", no_argument, 0, O_VERBOSE},            {"stop_after_steps", required_argument, 0, O_STOP},
        {"help", no_argument, 0, 'h'},                     {0, 0, 0, 0},
    };
    opterr = 0;
    for (int c; (c = getopt_long(argc, argv, "h", opts, NULL)) != -1;) {
        char *end;
        switch (c) {
        case O_IN: input_dir = optarg; break;
        case O_OUT: output_dir = optarg; break;
        case O_STEPS: steps = (int)cvx_flag_int("--num_inference_steps", optarg, 1, 1000000); break;
        case O_GUIDE: guidance = cvx_flag_num("--guidance_scale", optarg, 0, 1e6); break;
        case O_DYN: dynamic_cfg = 1; break;
        case O_SEED:
            errno = 0;
            seed = strtoull(optarg, &end, 10);
            if (!optarg[0] || *end || errno || optarg[0] == '-')
                cvx_die("--seed must be a non-negative integer below 2^64, got '%s'", optarg);
            break;
        case O_H: height = (int)cvx_flag_int("--height", optarg, 1, 65536); break;
        case O_W: width = (int)cvx_flag_int("--width", optarg, 1, 65536); break;
        case O_F: frames = (int)cvx_flag_int("--frames", optarg, 1, 65536); break;
        case O_FPS: fps = (int)cvx_flag_int("--fps", optarg, 1, 1000); break;
        case O_MODEL_ID: model_id = optarg; break;
        case O_MODEL_DIR: model_dir_arg = optarg; break;
        case O_SCHED: scheduler_arg = optarg; break;
        case O_THREADS: threads = (int)cvx_flag_int("--threads", optarg, 0, 4096); break;
        case O_RESUME: resume = 1; break;
        case O_CKPT: checkpoint_every = (int)cvx_flag_int("--checkpoint_every", optarg, 0, 1000000); break;
        case O_DTYPE:
            if (!strcmp(optarg, "f32") || !strcmp(optarg, "float32")) out_dtype = CVX_F32;
            else if (!strcmp(optarg, "bf16") || !strcmp(optarg, "bfloat16")) out_dtype = CVX_BF16;
            else cvx_die("--output_dtype must be f32 or bf16, got '%s'", optarg);
            break;
        case O_QUIET: verbosity = 0; break;
        case O_VERBOSE: verbosity = 2; break;
        case O_STOP: stop_after = (int)cvx_flag_int("--stop_after_steps", optarg, 0, 1000000); break;
        case 'h': usage(stdout); return 0;
        default: cvx_die("unknown or incomplete option '%s' (see --help)", argv[optind - 1]);
        }
    }
    if (optind < argc) cvx_die("unexpected argument '%s' (see --help)", argv[optind]);
    if (model_id && model_dir_arg) cvx_die("give --model_id or --model_dir, not both");
    const cogvideox_scheduler_type *kind_override = NULL;
    if (scheduler_arg) {
        int ok = 0;
        for (int i = 0; cogvideox_schedulers[i]; i++) ok |= !strcmp(scheduler_arg, cogvideox_schedulers[i]->name);
        char names[256];
        cogvideox_scheduler_names(names, sizeof names, " or ");
        if (!ok) cvx_die("--scheduler must be %s, got '%s'", names, scheduler_arg);
        kind_override = cogvideox_scheduler_find(scheduler_arg);
    }
    if (!output_dir) output_dir = input_dir;
    cvx_set_verbosity(verbosity);
    cvx_set_threads(threads);
    const double t0 = cvx_time();

    /* ---- inputs: everything is checked before anything is written ---- */
    char emb_path[4200], in_gc[4200], out_gc[4200], lat_path[4200], ckpt_path[4200];
    if (cvx_path_join(emb_path, sizeof emb_path, input_dir, EMBEDDINGS_FILE) ||
        cvx_path_join(in_gc, sizeof in_gc, input_dir, GENCONFIG_FILE) ||
        cvx_path_join(out_gc, sizeof out_gc, output_dir, GENCONFIG_FILE) ||
        cvx_path_join(lat_path, sizeof lat_path, output_dir, LATENTS_FILE) ||
        cvx_path_join(ckpt_path, sizeof ckpt_path, output_dir, CHECKPOINT_FILE))
        cvx_die("path too long under %s or %s", input_dir, output_dir);
    if (!cvx_is_file(emb_path)) cvx_die("%s: input file not found (run stage1 first, or pass --input_dir)", emb_path);
    cvx_safetensors *emb = cvx_st_open(emb_path);
    if (!emb) cvx_die_last_error();

    /* the model: --model_dir / --model_id, else what stage1 recorded */
    char gc_model_id[4096] = "";
    cvx_config gc;
    if (cvx_is_file(in_gc)) {
        const char *v;
        if (cvx_config_load(&gc, in_gc) || cvx_cfg_str_or(&gc, "model_id", "", &v)) cvx_die_last_error();
        snprintf(gc_model_id, sizeof gc_model_id, "%s", v);
        cvx_config_free(&gc);
    }
    const char *model_name = model_dir_arg ? model_dir_arg : model_id ? model_id : gc_model_id[0] ? gc_model_id : NULL;
    if (!model_name) {
        const char *v = cvx_st_metadata(emb, "model_id");
        if (v && v[0]) model_name = v;
    }
    if (!model_name)
        cvx_die("no model given and %s records no model_id: pass --model_id ORG/NAME or --model_dir DIR", in_gc);
    if (model_dir_arg && !cvx_is_dir(model_dir_arg)) cvx_die("%s: model directory not found", model_dir_arg);
    char model_dir[4096], tr_dir[4200], sched_dir[4200], sched_cfg[4300];
    if (cvx_model_resolve(model_name, model_dir, sizeof model_dir) ||
        cvx_model_component(model_dir, "transformer", "config.json", tr_dir, sizeof tr_dir) ||
        cvx_model_component(model_dir, "scheduler", "scheduler_config.json", sched_dir, sizeof sched_dir))
        cvx_die_last_error();
    snprintf(sched_cfg, sizeof sched_cfg, "%s/scheduler_config.json", sched_dir);
    cvx_debug("model %s -> %s", model_name, model_dir);

    cogvideox_scheduler sched;
    if (cogvideox_scheduler_load(&sched, sched_cfg, kind_override)) cvx_die_last_error();
    cogvideox_transformer *m = cogvideox_load(tr_dir, NULL);
    if (!m) cvx_die_last_error();
    const cogvideox_config *c = cogvideox_get_config(m);

    /* defaults from the model: 1.0 = sample size ×8, 8 fps; 1.5 (patch_size_t) = the model card's
     * 768×1360 at 16 fps (its config's sample size is not the size it is used at) */
    cogvideox_sample_params p = {0};
    vae_scales(model_dir, &p.vae_scale_spatial, &p.vae_scale_temporal);
    int is_15 = c->patch_size_t > 0;
    p.frames = frames ? frames : c->sample_frames;
    p.height = height ? height : is_15 ? 768 : c->sample_height * p.vae_scale_spatial;
    p.width = width ? width : is_15 ? 1360 : c->sample_width * p.vae_scale_spatial;
    if (!fps) fps = is_15 ? 16 : 8;
    p.num_inference_steps = steps;
    p.guidance_scale = guidance;
    p.use_dynamic_cfg = dynamic_cfg;
    p.seed = seed;
    if (steps > sched.num_train_timesteps)
        cvx_die("--num_inference_steps %d: at most num_train_timesteps %d (%s)", steps, sched.num_train_timesteps,
                sched_cfg);

    cogvideox_latent_shape sh;
    if (cogvideox_latent_shape_for(c, &p, &sh)) cvx_die_last_error();
    const cvx_tensor *tp = cvx_st_find(emb, "prompt_embeds"), *tn = cvx_st_find(emb, "negative_prompt_embeds");
    if (cogvideox_check_embeddings(c, tp, tn, emb_path)) cvx_die_last_error();
    const int L = (int)tp->shape[1];
    float *prompt = cvx_tensor_f32_dup(tp), *negative = cvx_tensor_f32_dup(tn);

    /* the run's fingerprint: everything that changes the latents */
    char real_model[PATH_MAX], gbuf[64];
    uint64_t emb_hash;
    if (!realpath(model_dir, real_model)) snprintf(real_model, sizeof real_model, "%s", model_dir);
    if (hash_file(emb_path, &emb_hash)) cvx_die_last_error();
    cogvideox_fingerprint fp = {0};
    cogvideox_fingerprint_set(&fp, "model", "%s", real_model);
    cogvideox_fingerprint_set(&fp, "embeddings_fnv1a64", "%016llx", (unsigned long long)emb_hash);
    cogvideox_fingerprint_set(&fp, "num_inference_steps", "%d", p.num_inference_steps);
    format_double(p.guidance_scale, gbuf, sizeof gbuf);
    cogvideox_fingerprint_set(&fp, "guidance_scale", "%s", gbuf);
    cogvideox_fingerprint_set(&fp, "use_dynamic_cfg", "%s", p.use_dynamic_cfg ? "true" : "false");
    cogvideox_fingerprint_set(&fp, "seed", "%llu", (unsigned long long)p.seed);
    cogvideox_fingerprint_set(&fp, "height", "%d", p.height);
    cogvideox_fingerprint_set(&fp, "width", "%d", p.width);
    cogvideox_fingerprint_set(&fp, "frames", "%d", p.frames);
    cogvideox_fingerprint_set(&fp, "scheduler", "%s", sched.type->name);

    if (cvx_mkdirs(output_dir)) cvx_die_last_error();
    if (access(output_dir, W_OK) != 0) cvx_die("%s: output directory is not writable", output_dir);

    cvx_info("CogVideoX transformer: %d layers, %d heads x %d, %s; %s scheduler, %d steps, guidance %s%s, seed %llu",
             c->num_layers, c->num_attention_heads, c->attention_head_dim,
             c->use_rotary_positional_embeddings ? "rotary" : "sin-cos", sched.type->name,
             steps, gbuf, dynamic_cfg ? " (dynamic)" : "", seed);
    cvx_info("video %d frames %dx%d -> latents [1, %d, %d, %d, %d]%s", p.frames, p.height, p.width, sh.frames,
             sh.channels, sh.height, sh.width, sh.pad_frames ? " (with 1 padding frame)" : "");

    /* ---- the loop ---- */
    cogvideox_checkpointing ck = {ckpt_path, checkpoint_every, resume, stop_after, &fp};
    cogvideox_sample_result res;
    float *latents = cvx_alloc_f32(sh.numel);
    if (cogvideox_sample(m, &sched, &p, &sh, prompt, negative, L, &ck, NULL, NULL, latents, &res))
        cvx_die_last_error();
    if (res.steps_done < steps) {
        cvx_info("stopped after step %d of %d as asked (--stop_after_steps); state saved in %s, continue with --resume",
                 res.steps_done, steps, ckpt_path);
    } else {
        write_outputs(&p, &sh, latents, out_dtype, &sched, model_name, fps, lat_path, in_gc, out_gc, ckpt_path);
        char dur[32];
        cvx_format_duration(cvx_time() - t0, dur, sizeof dur);
        cvx_info("wrote %s (latents [1, %d, %d, %d, %d] %s, %d steps %s%s) and %s in %s (%.2f s/step), peak RSS %.0f MB",
                 lat_path, sh.channels, sh.frames - sh.pad_frames, sh.height, sh.width,
                 out_dtype == CVX_BF16 ? "bf16" : "f32", steps, sched.type->name,
                 res.resumed_from ? ", resumed" : "", out_gc, dur,
                 res.steps_done > res.resumed_from ? res.seconds / (res.steps_done - res.resumed_from) : 0.0,
                 cvx_peak_rss_bytes() / 1048576.0);
    }
    free(latents);
    free(prompt);
    free(negative);
    cogvideox_free(m);
    cogvideox_scheduler_free(&sched);
    cvx_st_close(emb);
    return 0;
}
