/* A transformer checkpoint -> GGUF with city96's rules (stage2/quantize.h). */
#include "quantize.h"

#include "error.h"
#include "gguf.h"
#include "quant.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

/* llama.h LLAMA_FTYPE_* used by the rules */
enum { FT_F32 = 0, FT_F16 = 1, FT_Q4_0 = 2, FT_Q5_0 = 8, FT_Q2_K = 10, FT_Q3_K_S = 11, FT_Q3_K_M = 12,
       FT_Q3_K_L = 13, FT_Q4_K_S = 14, FT_Q4_K_M = 15, FT_Q5_K_S = 16, FT_Q5_K_M = 17, FT_BF16 = 32 };

enum { QUANTIZATION_THRESHOLD = 1024, MAX_CONVERT_DIMS = 4 };

int cvx_quantize_parse_type(const char *name, unsigned *file_type, int *pure) {
    static const struct { const char *name; unsigned ft; } block_names[] = {
        {"q4_k", FT_Q4_K_S}, {"q5_k", FT_Q5_K_S}, {"q3_k", FT_Q3_K_S}};
    *pure = 0;
    for (size_t i = 0; i < sizeof block_names / sizeof block_names[0]; i++)
        if (!strcasecmp(name, block_names[i].name)) {
            *file_type = block_names[i].ft;
            *pure = 1;
            return 0;
        }
    const cvx_ggml_ftype *f = cvx_ggml_ftype_by_name(name);
    if (!f || f->id == FT_F32) {
        char list[256];
        return cvx_error("--quantize %s: expected a llama.cpp file type (%s) or a block type (q4_k, q5_k, q3_k)", name,
                         cvx_ggml_ftype_list(list, sizeof list));
    }
    *file_type = f->id;
    return 0;
}

static int has_any(const char *name, const char *const *subs) {
    for (; subs && *subs; subs++)
        if (strstr(name, *subs)) return 1;
    return 0;
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* lcpp.patch img_tensor_get_type: the bumps of the mixed file types. *i_wv counts the value
 * projections seen so far (file order). */
static cvx_dtype img_tensor_type(unsigned ft, cvx_dtype t, const char *name, int *i_wv) {
    static const char *const v_names[] = {"attn_v.weight", ".to_v.weight", ".v.weight", ".attn.w1v.weight",
                                          ".attn.w2v.weight", "_attn.v_proj.weight", NULL};
    static const char *const qkv_names[] = {"attn_qkv.weight", "attn.qkv.weight", "attention.qkv.weight", NULL};
    static const char *const ffn_names[] = {"ffn_down", ".ffn.2.weight", ".ff.net.2.weight", ".mlp.layer2.weight",
                                            ".adaln_modulation_mlp.2.weight", ".feed_forward.w2.weight", NULL};
    if (has_any(name, v_names)) {
        if (ft == FT_Q2_K) t = CVX_Q3_K;
        else if (ft == FT_Q3_K_M) t = *i_wv < 2 ? CVX_Q5_K : CVX_Q4_K;
        else if (ft == FT_Q3_K_L) t = CVX_Q5_K;
        else if (ft == FT_Q4_K_M || ft == FT_Q5_K_M) t = CVX_Q6_K;
        else if (ft == FT_Q4_K_S && *i_wv < 4) t = CVX_Q5_K;
        ++*i_wv;
    } else if (has_any(name, qkv_names)) {
        if (ft == FT_Q3_K_M || ft == FT_Q3_K_L) t = CVX_Q4_K;
        else if (ft == FT_Q4_K_M) t = CVX_Q5_K;
        else if (ft == FT_Q5_K_M) t = CVX_Q6_K;
    } else if (has_any(name, ffn_names) || (strstr(name, "experts.") && strstr(name, ".w2.weight"))) {
        if (ft == FT_Q3_K_M) t = CVX_Q4_K;
        else if (ft == FT_Q3_K_L || ft == FT_Q4_K_S) t = CVX_Q5_K;
        else if (ft == FT_Q4_K_M || ft == FT_Q5_K_M) t = CVX_Q6_K;
        else if (ft == FT_Q4_0) t = CVX_Q4_1;
        else if (ft == FT_Q5_0) t = CVX_Q5_1;
    }
    return t;
}

typedef struct {
    const cvx_tensor *src;
    char name[128];
    cvx_dtype base;    /* convert.py's storage: the values llama-quantize reads */
    cvx_dtype type;    /* stored in the file */
} entry;

typedef struct {
    entry *e;
} fill_ctx;

/* Tensor i's bytes: the source widened, rounded through its base storage type, then stored. */
static int fill(void *user, int i, void *dst, size_t nbytes) {
    const entry *e = &((fill_ctx *)user)->e[i];
    const int64_t n = e->src->numel, row = e->src->shape[e->src->ndim - 1], rows = n / row;
    float *v = cvx_alloc_f32((size_t)n);
    cvx_tensor_to_f32(e->src, v);
    if (e->base == CVX_F16 && e->src->dtype != CVX_F16)
        for (int64_t k = 0; k < n; k++) v[k] = cvx_f16_to_f32(cvx_f32_to_f16(v[k]));
    else if (e->base == CVX_BF16 && e->src->dtype != CVX_BF16)
        for (int64_t k = 0; k < n; k++) v[k] = cvx_bf16_to_f32(cvx_f32_to_bf16(v[k]));
    const cvx_quant_traits *tr = cvx_quant_of(e->type);
    const size_t row_bytes = nbytes / (size_t)rows;
#pragma omp parallel for schedule(dynamic, 16)
    for (int64_t r = 0; r < rows; r++) tr->from_f32_ref(v + r * row, (char *)dst + (size_t)r * row_bytes, row);
    free(v);
    return 0;
}

int cvx_quantize_to_gguf(const cvx_weights *src, const cvx_gguf_rules *rules, unsigned file_type, int pure,
                         const char *out_path, cvx_quantize_stats *stats) {
    const cvx_ggml_ftype *ft = cvx_ggml_ftype_by_id(file_type);
    if (!ft || file_type == FT_F32) return cvx_error("quantize: file type %u is not supported", file_type);
    const int quantizing = cvx_dtype_is_quant(ft->base);
    const int n = cvx_weights_count(src);
    entry *e = cvx_calloc((size_t)(n ? n : 1), sizeof *e);
    int *order = cvx_calloc((size_t)(n ? n : 1), sizeof *order), n_order = 0, i_wv = 0, rc = 0;
    cvx_quantize_stats st;
    memset(&st, 0, sizeof st);

    for (int i = 0; i < n && !rc; i++) {
        entry *x = &e[i];
        x->src = cvx_weights_at(src, i);
        const cvx_tensor *t = x->src;
        const char *name = t->name;
        if (!strncmp(name, "model.diffusion_model.", 22)) name += 22;   /* ComfyUI's prefix, as convert.py strips it */
        if (rules->rename) rules->rename(src, name, x->name, sizeof x->name);
        else snprintf(x->name, sizeof x->name, "%s", name);
        if (!x->name[0]) continue;   /* another component's tensor (the VAE of a combined file): left out */
        if (t->dtype != CVX_F32 && t->dtype != CVX_BF16 && t->dtype != CVX_F16) {
            rc = cvx_error("%s: tensor '%s' has dtype %s; a GGUF is made from F32, BF16 or F16 weights", t->file,
                           t->name, cvx_dtype_name(t->dtype));
            break;
        }
        /* convert.py: the base file's storage */
        const int wide = t->dtype == CVX_F32 || t->dtype == CVX_BF16;
        x->base = t->dtype == CVX_BF16 ? CVX_BF16 : CVX_F16;
        if (wide && (t->ndim == 1 || t->numel <= QUANTIZATION_THRESHOLD || has_any(x->name, rules->hiprec)))
            x->base = CVX_F32;
        if (t->ndim > MAX_CONVERT_DIMS) x->base = CVX_F32;   /* fix_5d_tensors.py re-adds it as F32 */
        if (file_type == FT_F16 && x->base == CVX_BF16) x->base = CVX_F16;
        if (file_type == FT_BF16 && x->base == CVX_F16) x->base = CVX_BF16;
        x->type = x->base;
        /* llama-quantize + lcpp.patch */
        if (quantizing && t->ndim == 2 && ends_with(x->name, "weight") && !has_any(x->name, rules->keep)) {
            cvx_dtype q = pure ? ft->base : img_tensor_type(file_type, ft->base, x->name, &i_wv);
            if (t->shape[1] % cvx_dtype_block(q)) q = CVX_F16, st.fallback_f16++;   /* city96's fallback */
            else st.quantized++;
            x->type = q;
        }
        st.by_type[x->type]++;
        st.bytes_in += (long long)t->nbytes;
    }
    /* the file's order: the source's, a > 4-D tensor right after its bias (fix_5d_tensors.py) */
    for (int i = 0; i < n && !rc; i++) {
        if (!e[i].name[0] || e[i].src->ndim > MAX_CONVERT_DIMS) continue;
        order[n_order++] = i;
        if (!ends_with(e[i].name, ".bias")) continue;
        char w[128];
        snprintf(w, sizeof w, "%.*s.weight", (int)strlen(e[i].name) - 5, e[i].name);
        for (int j = 0; j < n; j++)
            if (e[j].src->ndim > MAX_CONVERT_DIMS && !strcmp(e[j].name, w)) order[n_order++] = j;
    }
    for (int j = 0; j < n && !rc; j++) {   /* a > 4-D tensor without a bias: at the end */
        int placed = 0;
        for (int k = 0; k < n_order; k++) placed |= order[k] == j;
        placed |= !e[j].name[0];
        if (!placed) order[n_order++] = j;
    }

    cvx_gguf_writer *w = cvx_ggufw_new();
    entry *sorted = cvx_calloc((size_t)(n ? n : 1), sizeof *sorted);
    if (!rc)
        rc = cvx_ggufw_kv_str(w, "general.architecture", rules->arch) ||
             cvx_ggufw_kv_u32(w, "general.quantization_version", 2) ||
             cvx_ggufw_kv_u32(w, "general.file_type", file_type);
    for (int k = 0; k < n_order && !rc; k++) {
        sorted[k] = e[order[k]];
        rc = cvx_ggufw_tensor(w, sorted[k].name, sorted[k].src->ndim, sorted[k].src->shape, sorted[k].type, NULL) < 0;
    }
    fill_ctx fc = {sorted};
    if (!rc) rc = cvx_ggufw_write(w, out_path, fill, &fc);
    struct stat fst;
    if (!rc) rc = stat(out_path, &fst) ? cvx_error("%s: %s", out_path, strerror(errno)) : 0;
    if (!rc) st.bytes_out = (long long)fst.st_size;
    st.tensors = n_order;
    if (stats) *stats = st;
    cvx_ggufw_free(w);
    free(sorted), free(order), free(e);
    return rc ? -1 : 0;
}
