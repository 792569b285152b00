/* The tiny HunyuanVideo-1.5 image-to-video model of the tests (header-only: every test is one
 * program). No I2V model ships in models/: it is assembled in a directory of symlinks from the
 * pieces the golden e2e_i2v case shares with others (shared/golden_hv15 README §6):
 * models/hunyuanvideo15-tiny-random's text encoders, tokenizers and VAE (the same weights),
 * tests/data/golden_hv15/e2e_i2v/model's transformer (task_type i2v, 17 input channels), guider
 * and scheduler, e2e_i2v_siglip/model's SigLIP and feature extractor, and a model_index.json
 * naming HunyuanVideo15ImageToVideoPipeline.
 *
 *   char model[300], image[1200];
 *   tu_mkdtemp(model, sizeof model);
 *   hv15_i2v_model(model, NULL);              // or a vae/ of your own: hv15_i2v_model(dir, vae_dir)
 *   hv15_i2v_image(image, sizeof image);      // the case's 56×40 image, absolute
 */
#ifndef CVX_HV15_HARNESS_H
#define CVX_HV15_HARNESS_H

#include "testutil.h"

#include <unistd.h>

#define HV15_T2V_MODEL "models/hunyuanvideo15-tiny-random"
#define HV15_I2V_CASE "tests/data/golden_hv15/e2e_i2v"
#define HV15_I2V_SIGLIP "tests/data/golden_hv15/e2e_i2v_siglip"

/* the repository root (the tests' working directory) into root */
static inline void hv15_root(char *root, size_t n) {
    if (!getcwd(root, n)) fail_msg("getcwd failed");
}

/* The case's image (e2e_i2v_siglip/image.png) as an absolute path. */
static inline void hv15_i2v_image(char *path, size_t n) {
    char root[1024];
    hv15_root(root, sizeof root);
    if (snprintf(path, n, "%s/" HV15_I2V_SIGLIP "/image.png", root) >= (int)n) fail_msg("image path too long");
}

/* dir (an existing empty directory): the I2V model of symlinks (absolute). vae_dir NULL: the tiny
 * model's vae/ linked; else a directory vae/ holding a copy of vae_dir/config.json alone (the
 * caller writes its weights). */
static inline void hv15_i2v_model(const char *dir, const char *vae_dir) {
    static const struct {
        const char *from, *piece;
    } links[] = {
        {HV15_T2V_MODEL, "text_encoder"},           {HV15_T2V_MODEL, "text_encoder_2"},
        {HV15_T2V_MODEL, "tokenizer"},              {HV15_T2V_MODEL, "tokenizer_2"},
        {HV15_I2V_CASE "/model", "transformer"},    {HV15_I2V_CASE "/model", "guider"},
        {HV15_I2V_CASE "/model", "scheduler"},      {HV15_I2V_SIGLIP "/model", "image_encoder"},
        {HV15_I2V_SIGLIP "/model", "feature_extractor"},
    };
    char root[1024], cmd[4096], path[1024];
    hv15_root(root, sizeof root);
    for (size_t k = 0; k < sizeof links / sizeof links[0]; k++) {
        snprintf(cmd, sizeof cmd, "ln -s '%s/%s/%s' '%s/%s'", root, links[k].from, links[k].piece, dir, links[k].piece);
        tu_run_ok(cmd);
    }
    if (vae_dir) snprintf(cmd, sizeof cmd, "mkdir '%s/vae' && cp '%s/config.json' '%s/vae/'", dir, vae_dir, dir);
    else snprintf(cmd, sizeof cmd, "ln -s '%s/" HV15_T2V_MODEL "/vae' '%s/vae'", root, dir);
    tu_run_ok(cmd);
    snprintf(path, sizeof path, "%s/model_index.json", dir);
    const char *index =
        "{\"_class_name\": \"HunyuanVideo15ImageToVideoPipeline\", \"_diffusers_version\": \"0.36.0\"}\n";
    tu_write(path, index, strlen(index));
}

#endif
