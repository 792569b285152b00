/* Training-free step caching for any denoiser (stage2/denoiser.h): TeaCache (ali-vilab/TeaCache, its
 * CogVideoX / CogVideoX1.5 scripts), FirstBlockCache (diffusers >= 0.35,
 * hooks/first_block_cache.py) and DeepCache (the seed project's step cache for HunyuanVideo-1.5,
 * yangwhale/gpu-tpu-pedia tpu/HunyuanVideo-1.5/generate_hunyuan_torchax_staged). The rules, sources
 * and quirks: docs/caching.md.
 *
 * TeaCache, per step i of n (one decision for the whole CFG batch):
 *   i == 0 or i == n−1:  compute, acc = 0
 *   else: acc += p(Σ|e − e_prev| / Σ|e_prev|);  skip iff acc < threshold, else compute, acc = 0
 *   e_prev = e (every step)
 * with e = the time(+ofs) embedding before SiLU (row 0) and p = np.poly1d(coefficients). A
 * computed step stores R = h_after_blocks − h_before_blocks over both streams (text and video
 * rows); a skipped step adds R to the current patch embedding instead of running the blocks.
 * A denoiser with teacache_input (TeaCache4LTX-Video) has its own probe instead of e: block 0's
 * modulated input of every branch, the rel-L1 over the whole CFG batch (summed as FBCache's, below;
 * the previous step's probe kept per rank, as FBCache's P), and R spans the blocks and the output
 * norm with its modulation: a skipped step projects h_embedded + R.
 *
 * FirstBlockCache, per step: block 0 always runs; r = its residual on the video rows [B, N, D];
 * with P = r of the last computed step: compute iff there is no P, Σ|P| == 0, or
 * Σ|r − P| / Σ|P| > threshold. Compute: P = r, run blocks 1.., T = h_out − h_after_block0 (all
 * rows). Skip: h = h_after_block0 + T. The sums are taken per video row (D values, in double)
 * and the rows added in (branch, token) order, so the decision is the same bytes on any rank
 * layout.
 *
 * DeepCache, per step i (0-based): a full step iff i < start, i >= end, (i − start) % interval == 0,
 * or nothing is kept yet (the seed project's no_cache_steps). A full step runs blocks 0 .. n−2,
 * keeps the streams there (h, and the denoiser's aux stream: HunyuanVideo-1.5's text stream), runs
 * block n−1; a cached step embeds (the current step's time signal), puts the kept streams in place
 * of the embedded ones and runs block n−1 only. Then finalize as usual. No threshold.
 *
 * Under MPI (--cfg_parallel, --sp) every rank takes the same decision: TeaCache's e depends on t
 * (and the constant ofs) alone; FBCache and TeaCache on a family probe gather the row sums; DeepCache's depends on the step
 * index alone. Residuals and kept streams stay per rank.
 *
 * A threshold <= 0 turns caching off (plain forward, bit-identical, no buffers) — a deliberate
 * definition: upstream TeaCache at 0 can still skip with 2b/5b coefficients (p(x) < 0). */
#ifndef CVX_STAGE2_CACHE_H
#define CVX_STAGE2_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "safetensors.h"
#include "stage2/denoiser.h"

typedef enum { CVX_CACHE_NONE = 0, CVX_CACHE_TEACACHE, CVX_CACHE_FBCACHE, CVX_CACHE_DEEPCACHE } cvx_cache_kind;

/* DeepCache's defaults: the seed project's stage2_transformer.py (--cache_start_step 11,
 * --cache_end_step 45, --cache_step_interval 4) */
enum { CVX_DEEPCACHE_START = 11, CVX_DEEPCACHE_END = 45, CVX_DEEPCACHE_INTERVAL = 4 };

/* How the CFG batch [B, S, D] is spread over the ranks that run one forward together
 * (docs/distributed.md). One process: all of it. --cfg_parallel: branch c on CFG rank c;
 * --sp: token rows cvx_dist_split_range(S, sp, s) on SP rank s; both: rank w = c·sp + s of
 * `group` (cvx_dist_split_grid's numbering). */
struct cvx_dist;
typedef struct {
    const struct cvx_dist *group;   /* every rank of the run (NULL or 1 rank: one process) */
    int n_branches;                 /* B of the whole CFG batch: 2 with CFG, 1 without */
    int cfg, sp;                    /* group size = cfg × sp; cfg 2: one branch per rank, else all */
} cvx_cache_layout;

typedef struct {
    cvx_cache_kind kind;      /* NONE also when the threshold is <= 0 (TeaCache, FBCache) */
    double threshold;
    int first_computed, last_computed;   /* TeaCache: steps always computed at the start / the end (1, 1;
                                          * TeaCache4Wan2.1's use_ret_steps: 5, 0) */
    double coeffs[5];               /* TeaCache p(x) = c0·x⁴ + c1·x³ + c2·x² + c3·x + c4 (np.poly1d order) */
    int dc_start, dc_end, dc_interval;   /* DeepCache's window and interval (cvx_cache_set_deepcache) */
    int n_steps, num_layers;
    cvx_cache_layout lay;     /* one process with B = 1 until cvx_cache_set_layout */
    /* this rank's share, known from the first step: branches lb0 .. lb0 + lnb − 1, token rows
     * [r0, r1), video rows [v0, v1) ⊂ [L, S) */
    int S, L, N, D, lb0, lnb;
    int64_t r0, r1, v0, v1;
    /* TeaCache state */
    double acc;                     /* accumulated rescaled rel-L1 since the last computed step */
    float *prev_e;                  /* [E] e of the previous step */
    int E;
    /* residual of the skipped blocks, this rank's share [lnb, r1 − r0, D] of [B, S, D]:
     * TeaCache all blocks, FBCache blocks 1..; DeepCache: the kept stream h before the last block */
    float *resid;
    size_t n_resid;
    /* DeepCache: the kept aux stream [lnb, A, D] of [B, A, D] (cvx_fwd.aux: whole on every rank) */
    float *aux;
    size_t n_aux;
    int A;
    /* FBCache: P = block-0 video residual of the last computed step, X = this step's; TeaCache on a
     * family probe (denoiser teacache_input): P = the previous step's probe, X = this step's; this
     * rank's share [lnb, v1 − v0, D] of [B, N, D] */
    float *head_prev, *head_cur;
    size_t n_head;
    int global;                     /* resid / head_prev hold the whole batch (read from a checkpoint):
                                     * cut to this rank's share at the next step */
    float *hold;                    /* FBCache: h [S, D] of branch lb0 while branch lb0 + 1 runs block 0 */
    double *sums;                   /* FBCache: [B, N, 2] Σ|r − P|, Σ|P| per video row, and exchange space */
    /* the run's counts (checkpointed, so they cover a resumed run) */
    int64_t steps_computed, steps_skipped;
    /* the last decision: rel (TeaCache rel-L1 of e / FBCache diff), p(rel), acc after it */
    double last_rel, last_p, last_acc;
    int last_compute;
    /* tests: force decisions (1 compute, 0 skip) instead of the rule; NULL = the rule */
    int (*force)(void *user, int step);
    void *force_user;
} cvx_cache;

/* "none" / "teacache" / "fbcache" / "deepcache" → kind; -1 + cvx_error naming --cache. */
int cvx_cache_parse_kind(const char *s, cvx_cache_kind *out);
const char *cvx_cache_kind_name(cvx_cache_kind k);
/* 0.2 for TeaCache (upstream's default), 0.05 for FBCache (diffusers' default), 0 otherwise
 * (DeepCache has none). */
double cvx_cache_default_threshold(cvx_cache_kind k);
/* "c0,c1,c2,c3,c4" → out; -1 + cvx_error naming --teacache_coefficients. */
int cvx_teacache_parse_coefficients(const char *s, double out[5]);

/* State for one run of n_steps. coeffs NULL = zeros (FBCache ignores them). TeaCache and FBCache
 * become NONE when threshold <= 0 (DeepCache ignores it). -1 + cvx_error when FBCache or
 * DeepCache gets a model with < 2 blocks (num_layers 0: not known yet, cvx_cache_use_layers before
 * the first step). DeepCache starts with the defaults (CVX_DEEPCACHE_*). */
int cvx_cache_init(cvx_cache *c, cvx_cache_kind kind, double threshold, const double coeffs[5],
                         int n_steps, int num_layers);
/* TeaCache: the first `first` and the last `last` steps always compute (default 1 and 1). */
void cvx_cache_set_teacache_window(cvx_cache *c, int first, int last);
/* DeepCache: full steps before `start`, from `end` on, and every `interval`-th from `start`;
 * -1 + cvx_error naming the flag (start >= 0, end >= start, interval >= 1). */
int cvx_cache_set_deepcache(cvx_cache *c, int start, int end, int interval);
/* 1 when DeepCache's schedule runs step `step` in full (the seed project's no_cache_steps). */
int cvx_deepcache_full_step(const cvx_cache *c, int step);
/* The transformer's block count (the expert's); -1 + cvx_error when FBCache gets < 2 blocks. */
int cvx_cache_use_layers(cvx_cache *c, int num_layers);
/* Start over (the plan's cache_reset: an expert switch): the residuals, TeaCache's e_prev and
 * accumulator dropped, the rank share found again at the next forward; the run's counts, the
 * layout and the block count stay. */
void cvx_cache_reset(cvx_cache *c);
static inline int cvx_cache_active(const cvx_cache *c) { return c->kind != CVX_CACHE_NONE; }
void cvx_cache_free(cvx_cache *c);
/* Blocks not run so far: skipped steps × num_layers (TeaCache) or × (num_layers − 1) (FBCache,
 * DeepCache). */
int64_t cvx_cache_blocks_skipped(const cvx_cache *c);

/* np.poly1d(c)(x) by Horner in double, c highest power first. */
double cvx_poly1d(const double c[5], double x);
/* Σ|x − prev| / Σ|prev| in double, sequential (deterministic). */
double cvx_rel_l1(const float *x, const float *prev, size_t n);

/* The TeaCache rule for step `step` given the rel-L1 of its probe against the previous step's
 * (have_prev 0: none yet → compute); updates acc; 1 = compute, 0 = skip. */
int cvx_teacache_rule(cvx_cache *c, int step, int have_prev, double rel);
/* The same on e [E] (the generic probe); e_prev follows. */
int cvx_teacache_decide(cvx_cache *c, int step, const float *e, int E);
/* FBCache's rel-L1 in blocks that do not depend on how the batch is spread over ranks: for each
 * of `rows` video rows of D values, sums[2·i] = Σ|r − P| and sums[2·i + 1] = Σ|P| in double, in
 * order; the decision adds these rows in (branch, token) order (cvx_fbcache_rel). */
void cvx_fbcache_row_sums(const float *r, const float *P, size_t rows, int D, double *sums);
/* Σ num / Σ den over the row sums in order; *den_out gets Σ den. */
double cvx_fbcache_rel(const double *sums, size_t rows, double *den_out);
/* The FBCache rule given the rel-L1 of this step (have_prev 0: no P yet → compute). */
int cvx_fbcache_decide(cvx_cache *c, int step, int have_prev, double rel, double den);

/* Before the first step: how the batch is spread (the default is one process with B = 1). */
void cvx_cache_set_layout(cvx_cache *c, const cvx_cache_layout *lay);

/* One step of the CFG batch with caching (the plain forward per branch when not active): this
 * rank's branches, one forward of batch 1 each, as the uncached loop runs them (so that one
 * process and --cfg_parallel / --sp give the same bytes). `in` is the step's input (latents,
 * timestep; in->cond unused); branch j's conditioning is conds[j] (the family's, passed through);
 * out [lnb, d->n_out]. Collective over the layout's group for FBCache (the row sums); every rank
 * takes the same decision. -1 + cvx_error (alike on every rank: sizes, a checkpoint of another run). */
int cvx_cache_step(cvx_denoiser *d, cvx_cache *c, int step, const cvx_denoise_input *in, const void *const *conds,
                   float *out);

/* Checkpoint: tensors cache_counts I64 [2] and, when present, teacache_acc F64 [1],
 * teacache_prev_e F32 [E], cache_residual F32 [B·S·D] (DeepCache: deepcache_stream),
 * fbcache_head_residual F32 [B·N·D] (TeaCache on a family probe: teacache_prev_input),
 * deepcache_aux F32 [B·A·D] — the whole batch as one process
 * holds it, whatever the rank count. Collective over the layout's
 * group: every rank sends its share to rank 0, which writes (w NULL on the other ranks). */
int cvx_cache_save(cvx_cache *c, cvx_st_writer *w);
/* Every rank reads the whole state; each keeps its share from the next step on. */
int cvx_cache_load(cvx_cache *c, const cvx_safetensors *st, const char *path);

#endif
