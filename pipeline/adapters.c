/* LoRA adapters on a model handle (cvx_model_params.loras; common/lora.h): kept from
 * cvx_model_open, attached to the compute context once the transformer is loaded (the family row
 * gives its linear layers), detached before the model is freed; their files' hashes go into the
 * checkpoint fingerprint and generation_config.json. */
#include "pipeline/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "error.h"
#include "fileio.h"
#include "stage2/sampler.h"

static const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

int cvx_model_set_loras(cvx_model *m, const cvx_model_params *p) {
    if (p->n_loras < 0 || p->n_loras > CVX_MAX_LORAS)
        return cvx_error("%d LoRA files given, at most %d are supported", p->n_loras, CVX_MAX_LORAS);
    for (int i = 0; i < p->n_loras; i++) {
        const cvx_lora_spec *s = &p->loras[i];
        if (s->path && !cvx_is_file(s->path) && access(s->path, F_OK) == 0) {   /* a FIFO, a device: say so */
            const int fd = cvx_open_input(s->path);   /* (never blocks) */
            if (fd >= 0) close(fd);
            return cvx_error_prefix("--lora"), -1;
        }
        if (!s->path || !cvx_is_file(s->path))
            return cvx_error("--lora %s: no such file", s->path ? s->path : "(null)");
        m->lora_paths[i] = strdup(s->path);
        m->loras[i] = (cvx_lora_spec){m->lora_paths[i], s->weight};
        m->lora_experts[i] = p->lora_experts ? p->lora_experts[i] : 0;
        m->n_loras = i + 1;
    }
    m->lora_fuse = p->lora_fuse && p->n_loras > 0;
    return 0;
}

int cvx_model_attach_loras(cvx_model *m) {
    if (!m->n_loras || m->lora) return 0;
    cvx_lora_target *t = NULL;
    int n = m->family->lora_targets(m, &t);
    if (n < 0) return -1;
    cvx_lora_spec specs[CVX_MAX_LORAS];   /* those for every transformer and for the loaded expert */
    int n_specs = 0;
    for (int i = 0; i < m->n_loras; i++) {
        const int e = m->lora_experts[i];
        if (e && !m->lora_expert) {
            free(t);
            return cvx_error("--lora_%s %s: the model has one transformer (--lora_high / --lora_low are for Wan 2.2 "
                             "A14B's two experts): use --lora", e == 1 ? "high" : "low", m->loras[i].path);
        }
        if (!e || e == m->lora_expert) specs[n_specs++] = m->loras[i];
    }
    if (!n_specs) {
        free(t);
        return 0;
    }
    const double t0 = cvx_time();
    m->lora = cvx_lora_load(specs, n_specs, t, n, m->family->name, m->lora_fuse);
    free(t);
    if (!m->lora) return -1;
    if (m->lora_fuse)
        cvx_info("LoRA fused into %d layers: %.0f MB of merged copies, %.1f s", cvx_lora_layer_count(m->lora),
                 cvx_lora_fused_bytes(m->lora) / 1048576.0, cvx_time() - t0);
    m->ctx->lora = m->lora;
    return 0;
}

int cvx_model_reattach_loras(cvx_model *m) {
    if (m->ctx) m->ctx->lora = NULL;
    cvx_lora_free(m->lora);
    m->lora = NULL;
    return cvx_model_attach_loras(m);
}

void cvx_model_drop_loras(cvx_model *m) {
    if (m->ctx) m->ctx->lora = NULL;   /* before the set (and the model it targets) go */
    cvx_lora_free(m->lora);
    m->lora = NULL;
    for (int i = 0; i < m->n_loras; i++) free(m->lora_paths[i]);
    m->n_loras = 0;
}

int cvx_model_lora_hash(cvx_model *m, int i) {
    if (m->lora_xxh64[i][0]) return 0;
    if (cvx_file_xxh64(m->loras[i].path, m->lora_xxh64[i])) return cvx_error_prefix("--lora %s", m->loras[i].path);
    return 0;
}

/* The shortest form of w that reads back as w ("0.6", not 0.59999999999999998). */
static void shortest(double w, char *buf, size_t n) {
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, n, "%.*g", p, w);
        if (strtod(buf, NULL) == w) return;
    }
}

int cvx_lora_fingerprint(cvx_model *m, void *fpv) {
    cvx_fingerprint *fp = fpv;
    for (int i = 0; i < m->n_loras; i++) {
        char key[32], w[32];
        if (cvx_model_lora_hash(m, i)) return -1;
        snprintf(key, sizeof key, "lora.%d", i);
        shortest(m->loras[i].weight, w, sizeof w);
        cvx_fingerprint_set(fp, key, "%s xxh64 %s weight %s%s", base_name(m->loras[i].path), m->lora_xxh64[i], w,
                            m->lora_experts[i] ? (m->lora_experts[i] == 1 ? " high" : " low") : "");
    }
    if (m->n_loras) cvx_fingerprint_set(fp, "lora_fuse", "%s", m->lora_fuse ? "true" : "false");
    return 0;
}
