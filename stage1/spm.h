/* A C interface to libsentencepiece (C++): load a spiece.model, encode text to piece ids.
 * This file pair is the only C++ in the project; the T5 tokenizer logic lives in tokenizer.c. */
#ifndef CVX_STAGE1_SPM_H
#define CVX_STAGE1_SPM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct t5_spm t5_spm;

/* Load a sentencepiece ModelProto file. NULL + cvx_error naming the file on failure. */
t5_spm *t5_spm_load(const char *path);
void t5_spm_free(t5_spm *sp);

int t5_spm_piece_count(const t5_spm *sp);
int t5_spm_unk_id(const t5_spm *sp);
/* The piece string of id (0 <= id < piece count), valid while sp lives. */
const char *t5_spm_piece(const t5_spm *sp, int id);
/* Id of an exact piece string (the unk id when it is not in the vocabulary). */
int t5_spm_piece_to_id(const t5_spm *sp, const char *piece);

/* Encode text[0..len) (UTF-8) with the model's normaliser; *ids is malloc'ed (free() it),
 * *n gets the count (0 for text that normalises to nothing). -1 + cvx_error on failure. */
int t5_spm_encode(const t5_spm *sp, const char *text, size_t len, int **ids, int *n);

#ifdef __cplusplus
}
#endif

#endif
