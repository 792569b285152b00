/* LTX-Video's tiled VAE decode (stage3/ltx_vae_tiles.h) on the golden 0.9.5 tiny VAE
 * (tests/data/golden_ltx/vae095_decode_encode/model/vae) with random latents where tiles overlap.
 * The goldens are untiled, so the expected values are upstream's tiled_decode /
 * _temporal_tiled_decode written out here the way upstream runs them (every tile decoded first
 * with the untiled decoder, then the in-place blends in upstream's order, then the concatenation
 * and the crop): the library's streaming version must give the same bits. A tile as large as the
 * video gives the untiled decode exactly; the overlapping tiled decode is reported against the
 * untiled one (the published decoders are not causal: tiles are an approximation upstream too). */
#include "testutil.h"

#include "rng.h"
#include "stage3/ltx_vae.h"
#include "stage3/ltx_vae_tiles.h"

#define VAE_DIR "tests/data/golden_ltx/vae095_decode_encode/model/vae"

typedef struct {
    float *d;
    int T, H, W;
} tl;

static float *crop(const float *z, int C, int F, int h, int w, int f0, int nf, int y0, int th, int x0, int tw) {
    float *o = malloc(sizeof(float) * (size_t)C * nf * th * tw);
    for (int c = 0; c < C; c++)
        for (int f = 0; f < nf; f++)
            for (int y = 0; y < th; y++)
                for (int x = 0; x < tw; x++)
                    o[(((size_t)c * nf + f) * th + y) * tw + x] = z[(((size_t)c * F + f0 + f) * h + y0 + y) * w + x0 + x];
    return o;
}

static tl dec(ltx_vae *v, const float *z, int C, int F, int h, int w, int f0, int nf, int y0, int th, int x0, int tw) {
    float *s = crop(z, C, F, h, w, f0, nf, y0, th, x0, tw);
    tl t = {malloc(sizeof(float) * 3 * (size_t)(8 * (nf - 1) + 1) * 32 * th * 32 * tw), 8 * (nf - 1) + 1, 32 * th,
            32 * tw};
    ASSERT_OK(ltx_vae_decode(v, s, nf, th, tw, 0.05f, t.d));
    free(s);
    return t;
}

static float *at(tl *t, int c, int f, int y, int x) { return &t->d[(((size_t)c * t->T + f) * t->H + y) * t->W + x]; }

/* upstream's blend_v / blend_h / blend_t: b[.., k] = a[.., −e + k]·(1 − k/e) + b[.., k]·(k/e) */
static void blend(tl *a, tl *b, int extent, int axis) {
    int na = axis == 0 ? a->T : axis == 1 ? a->H : a->W, nb = axis == 0 ? b->T : axis == 1 ? b->H : b->W;
    int e = na < nb ? na : nb;
    e = e < extent ? e : extent;
    for (int k = 0; k < e; k++) {
        const float wa = (float)(1.0 - (double)k / e), wb = (float)((double)k / e);
        for (int c = 0; c < 3; c++)
            for (int f = 0; f < (axis == 0 ? 1 : b->T); f++)
                for (int y = 0; y < (axis == 1 ? 1 : b->H); y++)
                    for (int x = 0; x < (axis == 2 ? 1 : b->W); x++) {
                        int fb = axis == 0 ? k : f, yb = axis == 1 ? k : y, xb = axis == 2 ? k : x;
                        int fa = axis == 0 ? na - e + k : f, ya = axis == 1 ? na - e + k : y, xa = axis == 2 ? na - e + k : x;
                        float *pb = at(b, c, fb, yb, xb);
                        *pb = *at(a, c, fa, ya, xa) * wa + *pb * wb;
                    }
    }
}

/* upstream tiled_decode: all tiles, then blends (v then h, in place), then each tile's
 * [:stride, :stride] concatenated and cropped. out [3, To, 32h, 32w]. */
static void ref_spatial(ltx_vae *v, const float *z, int C, int F, int h, int w, int mn, int st, float *out) {
    const int lm = mn / 32, ls = st / 32, nr = (h + ls - 1) / ls, nc = (w + ls - 1) / ls, To = 8 * (F - 1) + 1;
    tl rows[8][8];
    for (int r = 0; r < nr; r++)
        for (int c = 0; c < nc; c++) {
            int th = h - r * ls < lm ? h - r * ls : lm, tw = w - c * ls < lm ? w - c * ls : lm;
            rows[r][c] = dec(v, z, C, F, h, w, 0, F, r * ls, th, c * ls, tw);
        }
    for (int r = 0; r < nr; r++)
        for (int c = 0; c < nc; c++) {
            if (r > 0) blend(&rows[r - 1][c], &rows[r][c], mn - st, 1);
            if (c > 0) blend(&rows[r][c - 1], &rows[r][c], mn - st, 2);
        }
    const int H = 32 * h, W = 32 * w;
    for (int r = 0, y0 = 0; r < nr; y0 += rows[r][0].H < st ? rows[r][0].H : st, r++)
        for (int c = 0, x0 = 0; c < nc; x0 += rows[r][c].W < st ? rows[r][c].W : st, c++)
            for (int ch = 0; ch < 3; ch++)
                for (int f = 0; f < To; f++)
                    for (int y = 0; y < st && y < rows[r][c].H && y0 + y < H; y++)
                        for (int x = 0; x < st && x < rows[r][c].W && x0 + x < W; x++)
                            out[(((size_t)ch * To + f) * H + y0 + y) * W + x0 + x] = *at(&rows[r][c], ch, f, y, x);
    for (int r = 0; r < nr; r++)
        for (int c = 0; c < nc; c++) free(rows[r][c].d);
}

static float *random_latents(int n, uint64_t seed) {
    float *z = malloc(sizeof(float) * (size_t)n);
    cvx_generator g;
    cvx_generator_seed(&g, seed);
    cvx_randn(&g, z, (size_t)n);
    return z;
}

static void compare(const char *what, const float *got, const float *want, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i]) fail_msg("%s: [%zu] = %.9g, expected %.9g", what, i, got[i], want[i]);
    print_message("  %s: %zu values bit-identical\n", what, n);
}

/* progress reports of the tiled decodes: one per tile decoded */
static int g_updates;
static void count_update(void *user, const char *label, int done, int total) {
    (void)user, (void)label, (void)total;
    if (done > 0) g_updates++;
}

/* 3×3 latents (96×96 pixels), tiles of 64 every 32: four overlapping tiles per row and column edge */
static void test_spatial(void **s) {
    (void)s;
    ltx_vae *v = ltx_vae_load(VAE_DIR, NULL);
    assert_non_null(v);
    const int C = ltx_vae_get_config(v)->latent_channels, F = 2, h = 3, w = 3, To = 9;
    const size_t n = (size_t)3 * To * 96 * 96;
    float *z = random_latents(C * F * h * w, 11), *got = malloc(sizeof(float) * n), *want = malloc(sizeof(float) * n);
    float *full = malloc(sizeof(float) * n);
    ltx_vae_tiling t = {.spatial = 1, .min_height = 64, .min_width = 64, .stride_height = 32, .stride_width = 32,
                        .min_frames = 16, .stride_frames = 8};
    int tiled;
    cvx_progress bar;   /* one update per tile: 3 × 3 tiles (rows and columns at 0, 1, 2 latents) */
    cvx_progress_start_cb(&bar, "vae decode", ltx_vae_tile_count(&t, F, h, w), count_update, NULL);
    g_updates = 0;
    ASSERT_OK(ltx_vae_decode_tiled(v, &t, z, F, h, w, 0.05f, got, &tiled, &bar));
    assert_int_equal(tiled, 1);
    assert_int_equal(ltx_vae_tile_count(&t, F, h, w), 9);
    assert_int_equal(bar.done, 9);
    assert_int_equal(g_updates, 9);
    ref_spatial(v, z, C, F, h, w, 64, 32, want);
    compare("spatial tiles 64 / stride 32", got, want, n);
    ASSERT_OK(ltx_vae_decode(v, z, F, h, w, 0.05f, full));
    print_message("  tiled against untiled: ");
    ASSERT_REL_L2(got, full, n, 1.0);   /* reported: an approximation, as upstream's */
    t.min_height = t.min_width = 96;    /* one tile: the untiled decode */
    ASSERT_OK(ltx_vae_decode_tiled(v, &t, z, F, h, w, 0.05f, got, &tiled, NULL));
    assert_int_equal(tiled, 0);
    compare("a tile as large as the video", got, full, n);
    t.min_height = 48;
    assert_int_equal(ltx_vae_decode_tiled(v, &t, z, F, h, w, 0.05f, got, &tiled, NULL), -1);
    assert_non_null(strstr(cvx_last_error(), "multiples of 32"));
    free(z), free(got), free(want), free(full);
    ltx_vae_free(v);
}

/* 4 latent frames (25 frames), temporal tiles of 16 frames every 8: three tiles blended in time */
static void test_temporal(void **s) {
    (void)s;
    ltx_vae *v = ltx_vae_load(VAE_DIR, NULL);
    assert_non_null(v);
    const int C = ltx_vae_get_config(v)->latent_channels, F = 4, h = 2, w = 1, To = 25, H = 64, W = 32;
    const size_t hw = (size_t)H * W, n = 3 * To * hw;
    float *z = random_latents(C * F * h * w, 12), *got = malloc(sizeof(float) * n), *want = malloc(sizeof(float) * n);
    ltx_vae_tiling t = {.framewise = 1, .min_height = 512, .min_width = 512, .stride_height = 448,
                        .stride_width = 448, .min_frames = 16, .stride_frames = 8};
    int tiled;
    cvx_progress bar;   /* tiles at latent frames 0, 1, 2 (the one at 3 would be a single frame, dropped) */
    cvx_progress_start_cb(&bar, "vae decode", ltx_vae_tile_count(&t, F, h, w), count_update, NULL);
    g_updates = 0;
    ASSERT_OK(ltx_vae_decode_tiled(v, &t, z, F, h, w, 0.05f, got, &tiled, &bar));
    assert_int_equal(tiled, 1);
    assert_int_equal(ltx_vae_tile_count(&t, F, h, w), 3);
    assert_int_equal(bar.done, 3);
    assert_int_equal(g_updates, 3);
    assert_int_equal(ltx_vae_tile_count(NULL, F, h, w), 1);
    /* upstream: tiles z[i : i + 3] for i = 0..3, each after the first without its last frame */
    tl row[4];
    int nt = 0;
    for (int i = 0; i < F; i++, nt++) {
        int L = F - i < 3 ? F - i : 3;
        row[nt] = dec(v, z, C, F, h, w, i, L, 0, h, 0, w);
        if (i > 0) {   /* decoded[:, :, :-1] */
            tl d = row[nt];
            tl c = {malloc(sizeof(float) * 3 * (size_t)(d.T - 1) * hw + 1), d.T - 1, H, W};
            for (int ch = 0; ch < 3; ch++)
                memcpy(c.d + (size_t)ch * c.T * hw, d.d + (size_t)ch * d.T * hw, sizeof(float) * c.T * hw);
            free(d.d);
            row[nt] = c;
        }
    }
    int pos = 0;
    for (int i = 0; i < nt; i++) {
        if (i > 0) blend(&row[i - 1], &row[i], 8, 0);
        int k = i > 0 ? 8 : 9;
        k = k < row[i].T ? k : row[i].T;
        for (int ch = 0; ch < 3; ch++)
            for (int f = 0; f < k && pos + f < To; f++)
                memcpy(want + ((size_t)ch * To + pos + f) * hw, row[i].d + ((size_t)ch * row[i].T + f) * hw,
                       sizeof(float) * hw);
        pos += k;
    }
    assert_int_equal(pos, To);
    compare("temporal tiles 16 / stride 8", got, want, n);
    for (int i = 0; i < nt; i++) free(row[i].d);
    free(z), free(got), free(want);
    ltx_vae_free(v);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spatial),
        cmocka_unit_test(test_temporal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
