/* TeaCache4Wan2.1's coefficient sets by transformer config (stage2/wan_family.h): 1.3B (and the
 * tiny models, <= 2048 wide), 14B (5120 wide), I2V 480P / 720P by the run's size, the use_ret_steps
 * sets; a transformer none was published for (Wan 2.2 TI2V-5B: 3072 wide, 48 channels) gets no
 * set (NULL, zeros) instead of 14B's. */
#include "testutil.h"

#include "stage2/wan_family.h"

static const char *pick(int heads, int head_dim, int in, int out, int image_dim, int h, int w, int ret, double c[5]) {
    wan_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.num_attention_heads = heads, cfg.attention_head_dim = head_dim;
    cfg.in_channels = in, cfg.out_channels = out, cfg.image_dim = image_dim;
    return wan_teacache_coefficients(&cfg, h, w, ret, c);
}

static void test_sets(void **state) {
    (void)state;
    double c[5];
    assert_string_equal(pick(12, 128, 16, 16, 0, 480, 832, 0, c), "Wan2.1-T2V-1.3B");
    assert_true(c[0] == 2.39676752e+03);
    assert_string_equal(pick(3, 16, 16, 16, 0, 48, 64, 0, c), "Wan2.1-T2V-1.3B");   /* the tiny model */
    assert_string_equal(pick(40, 128, 16, 16, 0, 480, 832, 1, c), "Wan2.1-T2V-14B (ret steps)");
    assert_string_equal(pick(40, 128, 36, 16, 1280, 480, 832, 0, c), "Wan2.1-I2V-14B-480P");
    assert_string_equal(pick(40, 128, 36, 16, 1280, 720, 1280, 0, c), "Wan2.1-I2V-14B-720P");
    c[2] = 7;
    assert_null(pick(24, 128, 48, 48, 0, 704, 1280, 0, c));   /* Wan 2.2 TI2V-5B */
    assert_true(c[0] == 0 && c[2] == 0 && c[4] == 0);
    assert_null(pick(24, 128, 16, 16, 0, 480, 832, 0, c));    /* 3072 wide, 16 channels: none either */
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_sets)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
