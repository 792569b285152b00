/* Qwen2.5-VL-7B text model benchmark (HunyuanVideo-1.5's MLLM text encoder): qwen_hidden_state of
 * one prompt at the real widths (hidden 3584, 28 heads / 4 KV heads × 128, intermediate 18944,
 * mrope (16, 24, 24)) with --layers random layers (bf16 weights, as the published checkpoint; a
 * text_encoder dir written to a temp dir by a child process and mmapped), on --tokens tokens (the
 * pipeline pads every prompt to 108 + 1000 = 1108) of which --valid are real (the rest masked as
 * keys, as upstream). Runs every loaded layer (hidden state index = --layers); the pipeline takes
 * hidden_states[-3], so on the real 28-layer model ours runs 26 layers where upstream runs 28.
 * --model DIR: a text_encoder dir to use instead (e.g. bench/pt_video_peer.py --case qwen --save-dir).
 * Prints wall and process CPU time (after --warmup runs; CPU time is less disturbed by other load),
 * the GFLOP of the forward and peak RSS, then:
 *   RESULT case=qwen precision=.. tokens=.. valid=.. layers=.. seconds=.. cpu_s=.. gflop=.. peak_rss_gb=..
 *
 *   bench_qwen [--tokens 1108] [--valid 120] [--layers 2] [--vocab 152064] [--warmup 0] [--threads N]
 *              [--precision f32|bf16] [--model DIR] */
#include "bench_models.h"
#include "error.h"
#include "runenv.h"
#include "safetensors.h"
#include "stage1/qwen2_5_vl.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BM_ADD(name, scale, offset, ...) \
    bm_add_random(w, store, name, sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t), (int64_t[]){__VA_ARGS__}, \
                  scale, offset)

enum { D = 3584, H = 28, KV = 4, HD = 128, I = 18944 };

static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Qwen2_5_VLTextModel's tensors (HF names, no prefix) with `layers` layers. */
static void write_qwen(const char *dir, int layers, int vocab) {
    const cvx_dtype store = CVX_BF16;
    FILE *f = bm_open_config(dir);
    fprintf(f, "{\"architectures\": [\"Qwen2_5_VLTextModel\"], \"model_type\": \"qwen2_5_vl_text\", \"hidden_size\": %d,"
               " \"intermediate_size\": %d, \"num_hidden_layers\": %d, \"num_attention_heads\": %d,"
               " \"num_key_value_heads\": %d, \"vocab_size\": %d, \"rms_norm_eps\": 1e-06, \"rope_theta\": 1000000.0,"
               " \"max_position_embeddings\": 128000, \"hidden_act\": \"silu\","
               " \"rope_scaling\": {\"type\": \"mrope\", \"mrope_section\": [16, 24, 24]}}\n",
            D, I, layers, H, KV, vocab);
    fclose(f);
    cvx_st_writer *w = cvx_stw_new();
    char n[256];
    const float sD = 1.0f / sqrtf((float)D);
    BM_ADD("embed_tokens.weight", 0.02f, 0, vocab, D);
    for (int l = 0; l < layers; l++) {
#define L_(s) (snprintf(n, sizeof n, "layers.%d.%s", l, s), n)
        BM_ADD(L_("self_attn.q_proj.weight"), sD, 0, H * HD, D);
        BM_ADD(L_("self_attn.q_proj.bias"), 0.02f, 0, H * HD);
        BM_ADD(L_("self_attn.k_proj.weight"), sD, 0, KV * HD, D);
        BM_ADD(L_("self_attn.k_proj.bias"), 0.02f, 0, KV * HD);
        BM_ADD(L_("self_attn.v_proj.weight"), sD, 0, KV * HD, D);
        BM_ADD(L_("self_attn.v_proj.bias"), 0.02f, 0, KV * HD);
        BM_ADD(L_("self_attn.o_proj.weight"), sD, 0, D, H * HD);
        BM_ADD(L_("mlp.gate_proj.weight"), sD, 0, I, D);
        BM_ADD(L_("mlp.up_proj.weight"), sD, 0, I, D);
        BM_ADD(L_("mlp.down_proj.weight"), 1.0f / sqrtf((float)I), 0, D, I);
        BM_ADD(L_("input_layernorm.weight"), 0.05f, 1, D);
        BM_ADD(L_("post_attention_layernorm.weight"), 0.05f, 1, D);
#undef L_
    }
    BM_ADD("norm.weight", 0.05f, 1, D);
    char path[1024];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (cvx_stw_write(w, path)) cvx_die_last_error();
    cvx_stw_free(w);
}

int main(int argc, char **argv) {
    cvx_runtime_setup(argc, argv);
    int tokens = HV15_MLLM_CROP_START + HV15_MLLM_MAX_LENGTH, valid = 120, layers = 2, vocab = 152064, warmup = 0,
        threads = 0;
    const char *precision = "f32", *model = NULL;
    static const struct option opts[] = {
        {"tokens", 1, 0, 'T'}, {"valid", 1, 0, 'v'}, {"layers", 1, 0, 'l'}, {"vocab", 1, 0, 'V'},
        {"warmup", 1, 0, 'w'}, {"threads", 1, 0, 't'}, {"precision", 1, 0, 'p'}, {"model", 1, 0, 'm'},
        {0, 0, 0, 0}};
    for (int o; (o = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        switch (o) {
        case 'T': tokens = atoi(optarg); break;
        case 'v': valid = atoi(optarg); break;
        case 'l': layers = atoi(optarg); break;
        case 'V': vocab = atoi(optarg); break;
        case 'w': warmup = atoi(optarg); break;
        case 't': threads = atoi(optarg); break;
        case 'p': precision = optarg; break;
        case 'm': model = optarg; break;
        default: fprintf(stderr, "usage: see bench/bench_qwen.c\n"); return 2;
        }
    }
    cvx_set_program_name("bench_qwen");
    if (tokens < 1 || valid < 1 || valid > tokens || layers < 1 || vocab < 1000 || warmup < 0)
        cvx_die("--tokens >= 1, --valid 1..tokens, --layers >= 1, --vocab >= 1000, --warmup >= 0");
    cvx_set_threads(threads);
    cvx_precision prec;
    if (cvx_precision_parse(precision, CVX_WORK_MATMUL, &prec)) cvx_die_last_error();
    char tmp[] = "/tmp/cvx_bench_qwen_XXXXXX";
    const char *dir = model;
    if (!dir) {
        if (!mkdtemp(tmp)) cvx_die("mkdtemp failed");
        dir = tmp;
        pid_t pid = fork();   /* the writer's memory does not count in this process's peak RSS */
        if (pid == 0) {
            write_qwen(dir, layers, vocab);
            _exit(0);
        }
        int st;
        if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st))
            cvx_die("writing the random model failed");
    }
    cvx_ctx *ctx = cvx_ctx_new(cvx_threads());
    if (cvx_ctx_set_precision(ctx, prec)) cvx_die_last_error();
    qwen_model m;
    if (qwen_load(&m, dir, -1, ctx)) cvx_die_last_error();
    const qwen_config *c = &m.cfg;
    const int L = c->num_layers, S = tokens;
    int64_t *ids = cvx_malloc(sizeof(int64_t) * S), *mask = cvx_malloc(sizeof(int64_t) * S);
    for (int i = 0; i < S; i++) ids[i] = (int64_t)((bm_urand() * 0.5f + 0.5f) * (c->vocab_size - 1)), mask[i] = i < valid;
    float *out = cvx_alloc_f32((size_t)S * c->hidden_size);
    for (int i = 0; i < warmup; i++)
        if (qwen_hidden_state(&m, ids, mask, S, L, out)) cvx_die_last_error();
    double f0 = ctx->flops, w0 = cvx_time(), c0 = cpu_seconds();
    if (qwen_hidden_state(&m, ids, mask, S, L, out)) cvx_die_last_error();
    double wall = cvx_time() - w0, cpu = cpu_seconds() - c0, gflop = (ctx->flops - f0) * 1e-9;
    printf("Qwen2.5-VL-7B text widths, %d layers, %d tokens (%d valid), %s, %d threads: %.2f s wall, %.2f s CPU,"
           " %.1f GFLOP (%.1f GFLOP/s wall); peak RSS %.2f GB\n", L, S, valid, cvx_precision_name(prec), cvx_threads(),
           wall, cpu, gflop, gflop / wall, cvx_peak_rss_bytes() / 1e9);
    printf("RESULT case=qwen precision=%s tokens=%d valid=%d layers=%d seconds=%.3f cpu_s=%.2f gflop=%.1f"
           " peak_rss_gb=%.3f\n", cvx_precision_name(prec), S, valid, L, wall, cpu, gflop, cvx_peak_rss_bytes() / 1e9);
    free(ids), free(mask), free(out);
    qwen_free(&m);
    cvx_ctx_free(ctx);
    if (!model) bm_rm_dir(tmp);
    return 0;
}
