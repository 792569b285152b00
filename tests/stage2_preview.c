/* Live preview (stage2/preview.c):
 *   - the latent → RGB sketch: one channel set gives gain·F[c] + bias per pixel (the community
 *     table, 3.5/scaling_factor gain), the padding frame is dropped, the ×up upscale is nearest;
 *   - the hook on the golden e2e_2b loop writes after every K-th step and the last, a PNG, atomically
 *     (no temp file left), from the scheduler's x0; the final latents are unchanged by previews. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <dirent.h>
#include <unistd.h>
#include <cmocka.h>

#include "config.h"
#include "error.h"
#include "ops.h"
#include "stage2/preview.h"
#include "stage2/sampler.h"
#include "stage2/cogvideox_family.h"
#include "stage2/wan_family.h"
#include "stage2/scheduler_ddpm.h"
#include "stage2/cogvideox.h"
#include "stage3/video.h"

#define GOLDEN "tests/data/golden"

static void test_latent_rgb(void **state) {
    (void)state;
    cvx_latent_shape sh = {.frames = 3, .pad_frames = 1, .channels = 16, .height = 2, .width = 3};
    sh.numel = (size_t)3 * 16 * 2 * 3;
    float *x0 = calloc(sh.numel, sizeof(float)), *rgb = malloc(sizeof(float) * 3 * 2 * 4 * 6);
    /* frame 1 (the first after the padding): channel 9 = 1 at pixel (1, 2); frame 0 (padding) = 100 */
    for (size_t i = 0; i < 16 * 6; i++) x0[i] = 100;
    x0[(size_t)1 * 16 * 6 + 9 * 6 + 1 * 3 + 2] = 1;
    cvx_latent_rgb tab;
    cogvideox_latent_rgb(0.7, &tab);
    cvx_preview_latent_rgb(x0, &sh, &tab, 2, rgb);   /* [3, 2, 4, 6] */
    const float F9[3] = {0.012138415094654218f, 0.024684961927224837f, 0.037211249767461915f}, bias[3] = {-0.023f, 0, -0.017f};
    for (int k = 0; k < 3; k++)
        for (int t = 0; t < 2; t++)
            for (int y = 0; y < 4; y++)
                for (int x = 0; x < 6; x++) {
                    float want = bias[k] + (t == 0 && y / 2 == 1 && x / 2 == 2 ? (float)(3.5 / 0.7) * F9[k] : 0.0f);
                    assert_true(fabsf(rgb[((k * 2 + t) * 4 + y) * 6 + x] - want) < 1e-7f);
                }
    free(x0); free(rgb);
}

/* Wan's layout [C, F, h, w] (no padding) with Wan's table (gain 1): the same pixel rule. */
static void test_latent_rgb_channels_major(void **state) {
    (void)state;
    cvx_latent_shape sh = {.frames = 2, .channels = 16, .height = 2, .width = 3, .channels_major = 1};
    sh.numel = (size_t)2 * 16 * 2 * 3;
    float *x0 = calloc(sh.numel, sizeof(float)), *rgb = malloc(sizeof(float) * 3 * 2 * 2 * 3);
    x0[(size_t)9 * 2 * 6 + 1 * 6 + 0 * 3 + 1] = 2;   /* channel 9, frame 1, pixel (0, 1) */
    cvx_preview_latent_rgb(x0, &sh, &wan_latent_rgb, 1, rgb);   /* [3, 2, 2, 3] */
    for (int k = 0; k < 3; k++)
        for (int t = 0; t < 2; t++)
            for (int i = 0; i < 6; i++) {
                float want = wan_latent_rgb.bias[k] + (t == 1 && i == 1 ? 2 * wan_latent_rgb.factors[9][k] : 0.0f);
                assert_true(fabsf(rgb[(k * 2 + t) * 6 + i] - want) < 1e-7f);
            }
    free(x0); free(rgb);
}

static void test_hook_on_loop(void **state) {
    (void)state;
    char p[512];
    cvx_config cj;
    assert_int_equal(cvx_config_load(&cj, GOLDEN "/e2e_2b/case.json"), 0);
    cvx_safetensors *st = cvx_st_open(GOLDEN "/e2e_2b/expected.safetensors");
    assert_non_null(st);
    cogvideox_transformer *m = cogvideox_load(GOLDEN "/e2e_2b/model/transformer", NULL);
    assert_non_null(m);
    cvx_loop_request sp_req = {.frames = 9, .height = 48, .width = 64, .num_inference_steps = 5, .guidance_scale = 6, .seed = 42};
    cvx_loop_params sp = {.req = &sp_req, .vae_scale_spatial = 8, .vae_scale_temporal = 4};
    cvx_latent_shape sh;
    assert_int_equal(cogvideox_latent_shape_for(cogvideox_get_config(m), &sp, 0, &sh), 0);
    float *pr = cvx_tensor_f32_dup(cvx_st_find(st, "prompt_embeds")), *ng = cvx_tensor_f32_dup(cvx_st_find(st, "negative_prompt_embeds"));
    int L = (int)cvx_st_find(st, "prompt_embeds")->shape[1];
    char tmpl[] = "/tmp/cvx_preview_XXXXXX";
    assert_non_null(mkdtemp(tmpl));
    snprintf(p, sizeof p, "%s/preview.png", tmpl);
    float *a = malloc(sh.numel * 4), *b = malloc(sh.numel * 4);
    cvx_sample_result res;
    cvx_scheduler s;
    assert_int_equal(cvx_scheduler_load(&s, GOLDEN "/e2e_2b/model/scheduler/scheduler_config.json", NULL), 0);
    assert_int_equal(cogvideox_sample_loop(m, 0, &s, &sp, NULL, &sh, pr, ng, L, NULL, NULL, NULL, a, &res), 0);
    cvx_scheduler_free(&s);
    assert_int_equal(cvx_scheduler_load(&s, GOLDEN "/e2e_2b/model/scheduler/scheduler_config.json", NULL), 0);
    cvx_latent_rgb tab2;
    cogvideox_latent_rgb(1.15258426, &tab2);
    cvx_preview pv = {.path = p, .every = 2, .n_steps = 5, .mode = CVX_PREVIEW_LATENT,
                            .rgb = &tab2, .sched = &s, .write_sheet = video_write_contact_sheet};
    assert_int_equal(cogvideox_sample_loop(m, 0, &s, &sp, NULL, &sh, pr, ng, L, NULL, cvx_preview_hook, &pv, b, &res), 0);
    assert_int_equal(pv.written, 3);   /* after steps 2, 4 and 5 (the last) */
    assert_memory_equal(a, b, sh.numel * 4);
    FILE *f = fopen(p, "rb");
    assert_non_null(f);
    unsigned char sig[8];
    assert_int_equal(fread(sig, 1, 8, f), 8);
    fclose(f);
    assert_memory_equal(sig, "\x89PNG\r\n\x1a\n", 8);
    /* only preview.png in the directory: the temp file was renamed */
    DIR *d = opendir(tmpl);
    int files = 0;
    for (struct dirent *e; (e = readdir(d));) files += e->d_name[0] != '.';
    closedir(d);
    assert_int_equal(files, 1);
    printf("  3 previews on a 5-step loop (every 2 + last), %.3f s in all; latents unchanged\n", pv.seconds);
    /* the x0 the hook sees is the scheduler's: DDIM's state after the step */
    assert_ptr_equal(s.type->x0(&s), s.state);
    unlink(p);
    rmdir(tmpl);
    cvx_scheduler_free(&s);
    free(a); free(b); free(pr); free(ng);
    cogvideox_free(m);
    cvx_st_close(st);
    cvx_config_free(&cj);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_latent_rgb), cmocka_unit_test(test_latent_rgb_channels_major), cmocka_unit_test(test_hook_on_loop)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
