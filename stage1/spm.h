/* A C interface to libsentencepiece (C++): load a spiece.model, encode text to piece ids.
 * This file pair is the only C++ in the project; the T5 tokenizer logic lives in tokenizer.c. */
#ifndef CVX_STAGE1_SPM_H
#define CVX_STAGE1_SPM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cvx_spm cvx_spm;

/* Load a sentencepiece ModelProto file. NULL + cvx_error naming the file on failure. */
cvx_spm *cvx_spm_load(const char *path);
void cvx_spm_free(cvx_spm *sp);

int cvx_spm_piece_count(const cvx_spm *sp);
int cvx_spm_unk_id(const cvx_spm *sp);
/* Id of an exact piece string (the unk id when it is not in the vocabulary). */
int cvx_spm_piece_to_id(const cvx_spm *sp, const char *piece);

/* Encode text[0..len) (UTF-8) with the model's normaliser; *ids is malloc'ed (free() it),
 * *n gets the count (0 for text that normalises to nothing). -1 + cvx_error on failure. */
int cvx_spm_encode(const cvx_spm *sp, const char *text, size_t len, int **ids, int *n);

#ifdef __cplusplus
}
#endif

#endif
