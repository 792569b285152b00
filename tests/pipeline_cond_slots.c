/* Conditioning as a named tensor set (pipeline/family.h cvx_cond_slot, pipeline/files.c) with a
 * fake family row of three slots, as HunyuanVideo-1.5's stage 1 will write them — prompt_embeds
 * [1, 6, 4], prompt_embeds_mask [1, 6] (I64), prompt_embeds_2 [1, 3, 2]:
 *   - stage 1's writer puts "<name>" and "negative_<name>" per slot with the right dtypes and a
 *     dtype_info naming them all; the reader gives back the same values (masks as 0/1), with text i's
 *     rows beside text 0's (the negative prompt) from cvx_encode_write_outputs' batch layout;
 *   - a missing tensor, a mask of another length and embeddings of another width are one error line
 *     naming the file, the tensor and the slot's rule;
 *   - the files of a one-slot family are what cvx_embeddings_write always wrote (byte for byte). */
#include "testutil.h"

#include <json-c/json.h>
#include <math.h>

#include "pipeline/internal.h"

static const cvx_cond_slot SLOTS[] = {
    {"prompt_embeds", 0, "the fake text length %d", "the fake width %d", .L = 6, .D = 4},
    {"prompt_embeds_mask", 1, "the fake text length %d", "(a mask)", .L = 6},
    {"prompt_embeds_2", 0, "the fake glyph length %d", "the fake glyph width %d", .L = 3, .D = 2},
    {0},
};

static const cvx_family FAKE = {.name = "Fake", .cond_slots = SLOTS};

static void fill(float *x, size_t n, float base) {
    for (size_t i = 0; i < n; i++) x[i] = base + 0.25f * (float)i;
}

static void test_write_read(void **state) {
    (void)state;
    char dir[] = "/tmp/cvx_cond_slots_XXXXXX", path[256];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/stage1_embeddings.safetensors", dir);
    /* two texts as stage 1 batches them: text 0 the negative prompt, text 1 the prompt */
    float e0[2 * 6 * 4], mask[2 * 6], e2[2 * 3 * 2];
    fill(e0, 48, -3.0f);
    fill(e2, 12, 7.0f);
    for (int i = 0; i < 12; i++) mask[i] = (i % 6) < (i < 6 ? 2 : 5) ? 1.0f : 0.0f;   /* 2 and 5 real tokens */
    const cvx_embeddings emb = {e0 + 24, e0, 6, 4};
    cvx_cond_set more = {.n = 2};
    more.t[0] = (cvx_cond_tensor){"prompt_embeds_mask", mask + 6, mask, 6, 1, 1};
    more.t[1] = (cvx_cond_tensor){"prompt_embeds_2", e2 + 6, e2, 3, 2, 0};
    ASSERT_OK(cvx_cond_write_set(NULL, path, &emb, &more, "a prompt", "", "fake/model"));

    cvx_safetensors *st = tu_open(path);
    const char *names[6] = {"prompt_embeds", "negative_prompt_embeds", "prompt_embeds_mask",
                            "negative_prompt_embeds_mask", "prompt_embeds_2", "negative_prompt_embeds_2"};
    for (int i = 0; i < 6; i++) {
        const cvx_tensor *t = cvx_st_find(st, names[i]);
        assert_non_null(t);
        assert_int_equal(t->dtype, i / 2 == 1 ? CVX_I64 : CVX_F32);
        assert_int_equal(t->ndim, i / 2 == 1 ? 2 : 3);
    }
    json_object *di = json_tokener_parse(cvx_st_metadata(st, "dtype_info")), *v;
    assert_non_null(di);
    assert_true(json_object_object_get_ex(di, "negative_prompt_embeds_mask", &v));
    assert_string_equal(json_object_get_string(v), "int64");
    json_object_put(di);

    cvx_model m;
    memset(&m, 0, sizeof m);
    m.family = &FAKE, m.has_denoiser_config = 1;
    cvx_embeddings got;
    cvx_cond_set gm;
    ASSERT_OK(cvx_embeddings_from_file(&m, st, &got));
    ASSERT_OK(cvx_cond_more_from_file(&m, st, &gm));
    assert_int_equal(got.L, 6);
    assert_int_equal(got.D, 4);
    assert_memory_equal(got.prompt, e0 + 24, 24 * sizeof(float));
    assert_memory_equal(got.negative, e0, 24 * sizeof(float));
    assert_int_equal(gm.n, 2);
    assert_string_equal(gm.t[0].name, "prompt_embeds_mask");
    assert_true(gm.t[0].is_mask && gm.t[0].L == 6 && gm.t[0].D == 1);
    assert_memory_equal(gm.t[0].prompt, mask + 6, 6 * sizeof(float));
    assert_memory_equal(gm.t[0].negative, mask, 6 * sizeof(float));
    assert_memory_equal(gm.t[1].prompt, e2 + 6, 6 * sizeof(float));
    assert_memory_equal(gm.t[1].negative, e2, 6 * sizeof(float));
    ASSERT_OK(cvx_embeddings_finite(&got, &gm));
    gm.t[1].negative[4] = NAN;
    assert_int_equal(cvx_embeddings_finite(&got, &gm), -1);
    assert_non_null(strstr(cvx_last_error(), "negative_prompt_embeds_2"));
    cvx_embeddings_free(&got);
    cvx_cond_set_free(&gm);
    cvx_st_close(st);

    /* bad files: a mask of another length, embeddings of another width, a missing tensor */
    more.t[0].L = 5;
    ASSERT_OK(cvx_cond_write_set(NULL, path, &emb, &more, "a prompt", "", "fake/model"));
    st = tu_open(path);
    assert_int_equal(cvx_cond_more_from_file(&m, st, &gm), -1);
    print_message("  refused: %s\n", cvx_last_error());
    assert_non_null(strstr(cvx_last_error(), "'prompt_embeds_mask'"));
    assert_non_null(strstr(cvx_last_error(), "(the fake text length 6)"));
    assert_int_equal(gm.n, 0);
    cvx_st_close(st);
    more.t[0].L = 6, more.t[1].D = 3, more.t[1].L = 2;
    ASSERT_OK(cvx_cond_write_set(NULL, path, &emb, &more, "a prompt", "", "fake/model"));
    st = tu_open(path);
    assert_int_equal(cvx_cond_more_from_file(&m, st, &gm), -1);
    print_message("  refused: %s\n", cvx_last_error());
    assert_non_null(strstr(cvx_last_error(), "(the fake glyph width 2: "));
    cvx_st_close(st);
    more.n = 1;
    ASSERT_OK(cvx_cond_write_set(NULL, path, &emb, &more, "a prompt", "", "fake/model"));
    st = tu_open(path);
    assert_int_equal(cvx_cond_more_from_file(&m, st, &gm), -1);
    print_message("  refused: %s\n", cvx_last_error());
    assert_non_null(strstr(cvx_last_error(), "tensor 'prompt_embeds_2' is missing"));
    cvx_st_close(st);
    unlink(path);
    rmdir(dir);
}

/* a one-slot family's file is cvx_embeddings_write's, byte for byte */
static void test_one_slot_unchanged(void **state) {
    (void)state;
    char dir[] = "/tmp/cvx_cond_slots_XXXXXX", a[256], b[256];
    assert_non_null(mkdtemp(dir));
    snprintf(a, sizeof a, "%s/a.safetensors", dir);
    snprintf(b, sizeof b, "%s/b.safetensors", dir);
    float e[2 * 6 * 4];
    fill(e, 48, 1.0f);
    ASSERT_OK(cvx_embeddings_write(a, e + 24, e, 6, 4, "p", "n", "m"));
    const cvx_embeddings emb = {e + 24, e, 6, 4};
    const cvx_cond_set none = {0};
    ASSERT_OK(cvx_cond_write_set(NULL, b, &emb, &none, "p", "n", "m"));
    size_t na, nb;
    char *fa = cvx_read_file(a, &na), *fb = cvx_read_file(b, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(fa, fb, na);
    free(fa), free(fb);
    cvx_safetensors *st = tu_open(b);
    assert_string_equal(cvx_st_metadata(st, "dtype_info"),
                        "{\"prompt_embeds\": \"float32\", \"negative_prompt_embeds\": \"float32\"}");
    cvx_st_close(st);
    unlink(a), unlink(b), rmdir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_write_read), cmocka_unit_test(test_one_slot_unchanged)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
