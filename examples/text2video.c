/* text -> MP4 with the pipeline library (docs/api.md).
 *   text2video MODEL "a prompt" out.mp4 [steps] */
#include <stdio.h>
#include <stdlib.h>

#include "error.h"
#include "pipeline/cvx.h"
#include "stage3/video.h"

int main(int argc, char **argv) {
    if (argc < 4) return fprintf(stderr, "usage: %s MODEL PROMPT OUT.mp4 [STEPS]\n", argv[0]), 2;
    cvx_model *m = cvx_model_open(&(cvx_model_params){.model = argv[1]});
    if (!m) return fprintf(stderr, "%s\n", cvx_last_error()), 1;
    cvx_embeddings emb;
    cvx_latents lat;
    cvx_frames video;
    cvx_encode_params ep = {.prompt = argv[2]};
    cvx_sample_params sp = {.num_inference_steps = argc > 4 ? atoi(argv[4]) : 50, .guidance_scale = 6, .seed = 42};
    cvx_decode_params dp = {.tiling = CVX_TILING_AUTO};
    if (cvx_encode(m, &ep, NULL, NULL, &emb) || cvx_sample(m, &sp, &emb, NULL, NULL, &lat) ||
        cvx_decode(m, &dp, lat.data, 1, lat.C, lat.T, lat.h, lat.w, NULL, NULL, NULL, &video))
        return fprintf(stderr, "%s\n", cvx_last_error()), 1;
    video_opts vo = {.fps = cvx_model_get_info(m)->fps, .crf = 18};
    if (video_write_mp4(argv[3], video.data[0], video.T, video.H, video.W, &vo, NULL))
        return fprintf(stderr, "%s\n", cvx_last_error()), 1;
    printf("wrote %s: %d frames %dx%d\n", argv[3], video.T, video.W, video.H);
    cvx_frames_free(&video);
    cvx_latents_free(&lat);
    cvx_embeddings_free(&emb);
    cvx_model_close(m);
    return 0;
}
