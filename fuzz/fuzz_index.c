/* libFuzzer target: sharded checkpoints. Each input is written as model.safetensors.index.json
 * into a temp directory that holds two small valid shards (made once at start with the writer),
 * then opened with cvx_weights_open both by the index path and by the directory. Exercises the
 * weight_map parser, shard path handling and the "tensor is where the index says" checks. */
#include "error.h"
#include "safetensors.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char g_dir[4096], g_index[4200], g_shard1[4200], g_shard2[4200];
static volatile size_t g_sink;

static const char *const k_names[] = {
    "patch_embed.proj.weight", "patch_embed.proj.bias", "norm_final.weight", "steps", "mask", "", "missing",
    "ff.weight", "ff.Q4_0_qweight",   /* a MinusZone qweight (shard 1) and its view's name */
};

static void cleanup(void) {
    unlink(g_index);
    unlink(g_shard1);
    unlink(g_shard2);
    rmdir(g_dir);
}

static void make_shards(void) {
    float w[2 * 3 * 4] = {0}, b[3] = {1, 2, 3}, nf[4] = {0.5f, -1, 2, 0};
    int64_t steps[2] = {999, 0};
    unsigned char mask[5] = {1, 0, 1, 1, 0}, blocks[2 * 36] = {0x00, 0x3c};   /* Q4_0 rows of 64 values, d = 1 */
    cvx_st_writer *s1 = cvx_stw_new();
    if (cvx_stw_add_f32(s1, "patch_embed.proj.weight", CVX_F32, 3, (int64_t[]){2, 3, 4}, w) ||
        cvx_stw_add_f32(s1, "patch_embed.proj.bias", CVX_BF16, 1, (int64_t[]){3}, b) ||
        cvx_stw_add(s1, "ff.Q4_0_qweight", CVX_U8, 2, (int64_t[]){2, 36}, blocks) ||
        cvx_stw_metadata(s1, "format", "pt") || cvx_stw_write(s1, g_shard1))
        cvx_die_last_error();
    cvx_stw_free(s1);
    cvx_st_writer *s2 = cvx_stw_new();
    if (cvx_stw_add_f32(s2, "norm_final.weight", CVX_BF16, 1, (int64_t[]){4}, nf) ||
        cvx_stw_add(s2, "steps", CVX_I64, 1, (int64_t[]){2}, steps) ||
        cvx_stw_add(s2, "mask", CVX_BOOL, 1, (int64_t[]){5}, mask) ||
        cvx_stw_add(s2, "empty", CVX_F32, 1, (int64_t[]){0}, nf) || cvx_stw_write(s2, g_shard2))
        cvx_die_last_error();
    cvx_stw_free(s2);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    cvx_set_verbosity(0);
    const char *tmp = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/cvx_fuzz_index.XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(g_dir)) { perror("mkdtemp"); exit(1); }
    snprintf(g_index, sizeof g_index, "%s/model.safetensors.index.json", g_dir);
    snprintf(g_shard1, sizeof g_shard1, "%s/model-00001-of-00002.safetensors", g_dir);
    snprintf(g_shard2, sizeof g_shard2, "%s/model-00002-of-00002.safetensors", g_dir);
    atexit(cleanup);
    make_shards();
    return 0;
}

static void try_open(const char *path) {
    cvx_clear_error();
    cvx_weights *w = cvx_weights_open(path);
    if (!w) {
        if (!strstr(cvx_last_error(), g_dir)) abort();  /* errors name the file */
        return;
    }
    g_sink += (size_t)cvx_weights_count(w) + strlen(cvx_weights_path(w));
    for (size_t i = 0; i < sizeof k_names / sizeof k_names[0]; i++) {
        const cvx_tensor *t = cvx_weights_find(w, k_names[i]);
        if (t && t->nbytes) g_sink += ((const unsigned char *)t->data)[t->nbytes - 1];
        t = cvx_weights_get(w, k_names[i], CVX_SHAPE(-1, 3, 4));
        if (t) g_sink += (size_t)t->numel;
        t = cvx_weights_get(w, k_names[i], CVX_SHAPE(-1));
        if (t) g_sink += (size_t)t->numel;
        t = cvx_weights_get(w, k_names[i], CVX_SHAPE(2, 64));   /* the qweight view's shape */
        if (t) g_sink += (size_t)t->numel;
        t = cvx_weights_get(w, k_names[i], CVX_SHAPE(2, 48));   /* not whole blocks: the view's error */
        if (t) g_sink += (size_t)t->numel;
    }
    cvx_weights_close(w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FILE *f = fopen(g_index, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0) { perror(g_index); abort(); }
    try_open(g_index);
    try_open(g_dir);  /* directory lookup picks the index */
    return 0;
}
