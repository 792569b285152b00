/* The halves of a VAE a load takes (a bit set): decoding needs only the decoder's tensors,
 * encoding only the encoder's. The other half's tensors are neither looked up nor read, so a
 * decode-only stage 3 never touches the encoder's pages of the mapped file, nor fails on them. */
#ifndef CVX_STAGE3_VAE_PARTS_H
#define CVX_STAGE3_VAE_PARTS_H

typedef enum {
    VAE_PART_DECODER = 1,
    VAE_PART_ENCODER = 2,
    VAE_PART_BOTH = 3,
} vae_parts;

#endif
