/* What a weight file would load as, from its tensor names and shapes (cvx-inspect): the
 * component (transformer, text encoder, VAE, image encoder, LoRA), its family and the variant
 * whose shape it has. The names are those the loaders read (diffusers names, Wan's original /
 * ComfyUI names, llama.cpp's T5 names, MinusZone's *_qweight views). */
#ifndef CVX_TOOLS_WEIGHTS_ID_H
#define CVX_TOOLS_WEIGHTS_ID_H

#include "safetensors.h"

typedef struct {
    char what[160];      /* "CogVideoX transformer (diffusers names), 30 blocks, width 1920, 16 input channels" */
    char family[32];     /* "CogVideoX", "Wan", "" */
    char variant[64];    /* "CogVideoX-2b", "" when no known variant has this shape */
} weights_identity;

void weights_identify(const cvx_weights *w, weights_identity *id);

#endif
