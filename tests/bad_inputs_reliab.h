/* Preparations of the issue-37 cases of tests/e2e_bad_inputs.c (included after
 * bad_inputs_prep.h, whose helpers they use): NaN through every attention kernel, outputs that
 * are not regular files, FIFOs as inputs, a reused --png_dir. */
#ifndef BAD_INPUTS_RELIAB_H
#define BAD_INPUTS_RELIAB_H

#include <sys/sysmacros.h>

/* one NaN in the first block's to_q of the 5b-style tiny model: every score of head 0 is NaN. The
 * f32 case runs 112x96 (352 tokens, a multiple of 8: no key takes the scalar exp tail, which kept
 * NaN even before issue 37's fix; the 8-lane exp turned it into e^-87 and the run exited 0). */
static void p_nan_to_q(const char *D, const char *X) {
    (void)D;
    char cmd[3 * PATH_MAX], real[PATH_MAX];
    if (!realpath(GOLDEN "/e2e_5b/model", real)) fail_msg("no " GOLDEN "/e2e_5b/model");
    snprintf(cmd, sizeof cmd, "cp -r '%s' '%s/model'", real, X);
    tu_run_ok(cmd);
    poke(X, "model/transformer/diffusion_pytorch_model.safetensors", "transformer_blocks.0.attn1.to_q.weight", 0, NAN);
}
static void p_lora_file(const char *D, const char *X) { (void)D; put(X, "l.safetensors", "x"); }
static void p_out_symlink(const char *D, const char *X) {   /* X/v.mp4 -> X/victim */
    (void)D;
    char a[512], b[512];
    put(X, "victim", "keep");
    snprintf(a, sizeof a, "%s/victim", X);
    snprintf(b, sizeof b, "%s/v.mp4", X);
    assert_int_equal(symlink(a, b), 0);
}
static void p_chardev(const char *D, const char *X) {   /* X/null: a node of /dev/null's device */
    (void)D;
    char p[512];
    snprintf(p, sizeof p, "%s/null", X);
    if (mknod(p, S_IFCHR | 0666, makedev(1, 3)) != 0) assert_int_equal(mkfifo(p, 0644), 0);   /* not root: a FIFO */
}
/* X/out/NAME as a symlink to X/victim (an output directory whose file was replaced by a link) */
static void out_link(const char *X, const char *name) {
    char a[512], b[512];
    put(X, "victim", "keep");
    snprintf(a, sizeof a, "%s/out", X);
    assert_int_equal(mkdir(a, 0755), 0);
    snprintf(a, sizeof a, "%s/victim", X);
    snprintf(b, sizeof b, "%s/out/%s", X, name);
    assert_int_equal(symlink(a, b), 0);
}
static void p_out_latents_link(const char *D, const char *X) { (void)D; out_link(X, "stage2_latents.safetensors"); }
static void p_out_checkpoint_link(const char *D, const char *X) { (void)D; out_link(X, "stage2_checkpoint.safetensors"); }
static void p_out_embeddings_link(const char *D, const char *X) { (void)D; out_link(X, "stage1_embeddings.safetensors"); }
static void fifo_at(const char *X, const char *rel) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", X, rel);
    assert_int_equal(unlink(p), 0);
    assert_int_equal(mkfifo(p, 0644), 0);
}
static void p_model_fifo_transformer(const char *D, const char *X) {
    (void)D;
    model_copy(X);
    fifo_at(X, "model/transformer/diffusion_pytorch_model.safetensors");
}
static void p_model_fifo_vae(const char *D, const char *X) {
    (void)D;
    model_copy(X);
    fifo_at(X, "model/vae/diffusion_pytorch_model.safetensors");
}
static void p_png_dir_used(const char *D, const char *X) {   /* a frame of an earlier, longer run */
    (void)D;
    char p[512];
    snprintf(p, sizeof p, "%s/png", X);
    assert_int_equal(mkdir(p, 0755), 0);
    put(X, "png/frame_0030.png", "old");
}

/* ---- messages that misled (item 8) ---- */
static void p_checkpoint_bf16(const char *D, const char *X) { (void)X; make_checkpoint(D, "--precision bf16"); }
static void p_gguf_bytes(const char *X, const char *name, const char *bytes, size_t n) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", X, name);
    tu_write(p, bytes, n);
}
static void p_gguf_as_lora(const char *D, const char *X) { (void)D; p_gguf_bytes(X, "l.gguf", "GGUF\3\0\0\0xxxxxxxxxxxxxxxx", 24); }
static void p_gguf_bad_magic(const char *D, const char *X) { (void)D; p_gguf_bytes(X, "t.gguf", "GGUX\3\0\0\0xxxxxxxxxxxxxxxx", 24); }
static void p_gguf_empty(const char *D, const char *X) { (void)D; p_gguf_bytes(X, "t.gguf", "", 0); }
static void p_mz_q5_1(const char *D, const char *X) {   /* an unsupported qweight suffix in a MinusZone-style file */
    (void)D;
    char src[1200], dst[256];
    snprintf(src, sizeof src, "%s/transformer/diffusion_pytorch_model.safetensors", g_good.model);
    snprintf(dst, sizeof dst, "%s/mz.safetensors", X);
    void *zero = calloc(48 * 36, 1);
    tu_st_copy_edit(src, dst, "transformer_blocks.0.attn1.to_q.weight", "transformer_blocks.0.attn1.to_q.Q5_1_qweight",
                    CVX_U8, 2, (const int64_t[]){48, 36}, zero);
    free(zero);
}
/* the golden Wan GGUF, and a copy whose general.architecture "wan" reads "w@n" */
static void p_wan_gguf(const char *D, const char *X) {
    (void)D;
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cp '%s/wan/wan-Q4_0.gguf' '%s/wan.gguf'", "tests/data/golden_gguf", X);
    tu_run_ok(cmd);
}
static char *find_bytes(char *b, size_t n, const char *w, size_t k) {
    for (size_t i = 0; i + k <= n; i++)
        if (!memcmp(b + i, w, k)) return b + i;
    return NULL;
}
static void p_garbage_arch_gguf(const char *D, const char *X) {
    p_wan_gguf(D, X);
    char p[512];
    snprintf(p, sizeof p, "%s/wan.gguf", X);
    size_t n;
    char *b = cvx_read_file(p, &n);
    ASSERT_NONNULL(b);
    const char key[] = "general.architecture";
    char *k = find_bytes(b, n, key, sizeof key - 1);
    ASSERT_NONNULL(k);
    char *v = find_bytes(k, n - (size_t)(k - b), "wan", 3);   /* the value: type, length, then the bytes */
    ASSERT_NONNULL(v);
    v[1] = '@';
    tu_write(p, b, n);
    free(b);
}

#endif
