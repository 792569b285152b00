/* libFuzzer target: the generation_config.json / model config readers' validation — parse
 * (cvx_config_parse) then cvx_genconfig_validate and cvx_check_model_config, which every stage
 * runs on the configs it reads before using any value. Properties: no crash/UB/leak; a refusal
 * carries a message naming the file; an accepted config's range-checked values read back
 * inside their ranges with the typed getters the stages use. */
#include "config.h"
#include "error.h"
#include "validate.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cvx_config c;
    memset(&c, 0, sizeof c);
    cvx_clear_error();
    if (cvx_config_parse(&c, (const char *)data, size, "generation_config.json")) return 0;
    if (cvx_genconfig_validate(&c) == 0) {
        int64_t fps, steps;
        double g;
        if (cvx_cfg_int_or(&c, "fps", 8, &fps) == 0 && (fps < 1 || fps > 240)) abort();
        if (cvx_cfg_int_or(&c, "num_inference_steps", 50, &steps) == 0 && steps < 1) abort();
        if (cvx_cfg_num_or(&c, "guidance_scale", 6, &g) == 0 && !(g >= 0 && g <= 1e6)) abort();
    } else if (!strstr(cvx_last_error(), "generation_config.json")) {
        abort();
    }
    cvx_clear_error();
    if (cvx_check_model_config(&c) == 0) {
        int64_t layers;
        double sf;
        if (cvx_cfg_int_or(&c, "num_layers", 1, &layers) == 0 && (layers < 1 || layers > 1024)) abort();
        if (cvx_cfg_num_or(&c, "scaling_factor", 1, &sf) == 0 && !(sf > 0)) abort();
    } else if (!strstr(cvx_last_error(), "generation_config.json")) {
        abort();
    }
    cvx_config_free(&c);
    return 0;
}
