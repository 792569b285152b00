/* What a file of a staged run is (runfile.h). */
#include "tools/runfile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <json-c/json.h>

#include "config.h"
#include "error.h"
#include "fileio.h"
#include "pipeline/cvx.h"

const char *const rf_run_files[] = {"generation_config.json", "stage1_embeddings.safetensors",
                                    "stage1_conditioning.safetensors", "stage2_steps.json",
                                    "stage2_checkpoint.safetensors", "stage2_latents.safetensors",
                                    "output_frames.safetensors", "output_video.mp4", NULL};

const char *rf_kind_name(rf_kind k) {
    switch (k) {
    case RF_EMBEDDINGS: return "stage-1 embeddings";
    case RF_CONDITIONING: return "stage-1 conditioning";
    case RF_LATENTS: return "stage-2 latents";
    case RF_CHECKPOINT: return "stage-2 checkpoint";
    case RF_FRAMES: return "stage-3 decoded frames";
    case RF_TENSORS: return "tensors";
    case RF_WEIGHTS: return "model weights";
    case RF_MODEL_DIR: return "model directory";
    case RF_GENCONFIG: return "generation config";
    case RF_STEPS: return "stage-2 step record";
    case RF_VIDEO: return "video";
    case RF_RUN_DIR: return "run directory";
    }
    return "?";
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcasecmp(s + a - b, suffix) == 0;
}

int rf_model_family(const char *model, char *family, size_t n) {
    family[0] = 0;
    if (!model || !model[0]) return 0;
    cvx_model *m = cvx_model_open(&(cvx_model_params){.model = model, .threads = 1});
    if (!m) {
        cvx_clear_error();
        return 0;
    }
    snprintf(family, n, "%s", cvx_model_get_info(m)->family);
    cvx_model_close(m);
    return 0;
}

const char *rf_dtype_info(const rf_file *f, const char *tensor, char *buf, size_t n) {
    const char *di = f->st ? cvx_st_metadata(f->st, "dtype_info") : NULL;
    if (!di) return NULL;
    json_object *root = json_tokener_parse(di), *v;
    const char *r = NULL;
    if (root && json_object_is_type(root, json_type_object) && json_object_object_get_ex(root, tensor, &v) &&
        json_object_is_type(v, json_type_string)) {
        snprintf(buf, n, "%s", json_object_get_string(v));
        r = buf;
    }
    if (root) json_object_put(root);
    return r;
}

/* The stage file's kind from its tensors and metadata; RF_WEIGHTS when it looks like neither. */
static rf_kind stage_kind(const cvx_safetensors *st) {
    const char *format = cvx_st_metadata(st, "format");
    if (format && strstr(format, "stage2 checkpoint")) return RF_CHECKPOINT;
    if (format && strstr(format, "stage1 conditioning")) return RF_CONDITIONING;
    if (cvx_st_find(st, "prompt_embeds")) return RF_EMBEDDINGS;
    if (cvx_st_find(st, "latent_mean") && cvx_st_find(st, "latent_std")) return RF_CONDITIONING;
    const cvx_tensor *t = cvx_st_find(st, "latents");
    if (t && cvx_st_find(st, "step") && cvx_st_find(st, "generator")) return RF_CHECKPOINT;
    if (t && t->ndim == 5) return RF_LATENTS;
    if ((t = cvx_st_find(st, "decoded")) && t->ndim == 5 && t->shape[1] == 3) return RF_FRAMES;
    return cvx_st_metadata(st, "dtype_info") ? RF_TENSORS : RF_WEIGHTS;
}

static void set_family(rf_file *f, const char *family, const char *from) {
    snprintf(f->family, sizeof f->family, "%s", family);
    snprintf(f->family_from, sizeof f->family_from, "%s", family[0] ? from : "");
}

static int open_stage_file(const char *path, rf_file *f) {
    if (!(f->st = cvx_st_open(path))) return -1;
    f->kind = stage_kind(f->st);
    if (f->kind == RF_WEIGHTS) {   /* read again by the weights layer (shards, qweights) */
        cvx_st_close(f->st);
        f->st = NULL;
        return 0;
    }
    const char *v;
    char fam[32];
    if ((v = cvx_st_metadata(f->st, "model_family"))) set_family(f, v, "metadata model_family");
    if ((v = cvx_st_metadata(f->st, "mode"))) snprintf(f->mode, sizeof f->mode, "%s", v);
    if ((v = cvx_st_metadata(f->st, "num_inference_steps"))) f->n_steps = atoi(v);
    if (f->kind == RF_CHECKPOINT) {
        if ((v = cvx_st_metadata(f->st, "steps_done"))) f->step = atoi(v);
        if ((v = cvx_st_metadata(f->st, "run.num_inference_steps"))) f->n_steps = atoi(v);
        if (!f->family[0] && !rf_model_family(cvx_st_metadata(f->st, "run.model"), fam, sizeof fam))
            set_family(f, fam, "the model of its run.model");
        f->frames_major = !strcmp(f->family, "CogVideoX");   /* the loop layout [1, F, C, h, w] */
    }
    if (!f->family[0] && !rf_model_family(cvx_st_metadata(f->st, "model_id"), fam, sizeof fam))
        set_family(f, fam, "the model of its model_id");
    /* the staged TPU pipeline's latents: its metadata (sizes, dtype_info "torch.bfloat16"), none of
     * ours (model_family, mode); its embeddings are laid out as ours and cannot be told apart */
    const char *di = cvx_st_metadata(f->st, "dtype_info");
    f->staged_tpu = f->kind == RF_LATENTS && !cvx_st_metadata(f->st, "model_family") &&
                    !cvx_st_metadata(f->st, "mode") && (!di || strstr(di, "torch.") || !strstr(di, "\"float32\""));
    return 0;
}

static int dir_has(const char *dir, const char *name) {
    char p[4400];
    return !cvx_path_join(p, sizeof p, dir, name) && cvx_is_file(p);
}

int rf_open(const char *path, rf_file *f) {
    memset(f, 0, sizeof *f);
    if (snprintf(f->path, sizeof f->path, "%s", path) >= (int)sizeof f->path) return cvx_error("%s: path too long", path);
    if (cvx_is_dir(path)) {
        if (dir_has(path, "model_index.json") || dir_has(path, "config.json")) {
            f->kind = RF_MODEL_DIR;
            return rf_model_family(path, f->family, sizeof f->family);
        }
        for (int i = 0; rf_run_files[i]; i++)
            if (dir_has(path, rf_run_files[i])) return f->kind = RF_RUN_DIR, 0;
        f->kind = RF_VIDEO;   /* a folder of frame images (checked when read) */
        return 0;
    }
    if (!cvx_is_file(path)) return cvx_error("%s: no such file or directory", path);
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    if (ends_with(base, ".json")) {
        if (ends_with(base, ".safetensors.index.json")) return f->kind = RF_WEIGHTS, 0;
        cvx_config c;
        if (cvx_config_load(&c, path)) return -1;
        f->kind = cvx_cfg_has(&c, "steps") && cvx_cfg_has(&c, "format") ? RF_STEPS : RF_GENCONFIG;
        cvx_config_free(&c);
        return 0;
    }
    if (ends_with(base, ".gguf")) return f->kind = RF_WEIGHTS, 0;
    if (ends_with(base, ".safetensors")) return open_stage_file(path, f);
    /* by content: safetensors (u64 header length, then '{'), GGUF magic, else a video / image */
    FILE *fp = fopen(path, "rb");
    unsigned char head[9] = {0};
    size_t k = fp ? fread(head, 1, sizeof head, fp) : 0;
    if (fp) fclose(fp);
    if (k >= 4 && !memcmp(head, "GGUF", 4)) return f->kind = RF_WEIGHTS, 0;
    if (k == 9 && head[8] == '{' && !head[7] && !head[6] && !head[5]) return open_stage_file(path, f);
    f->kind = RF_VIDEO;   /* anything else: what libav decodes (checked when read) */
    return 0;
}

void rf_close(rf_file *f) {
    if (f->st) cvx_st_close(f->st);
    f->st = NULL;
}
