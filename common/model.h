/* Locating a model: a local diffusers directory, or a hub id ("zai-org/CogVideoX-2b")
 * resolved in the local HuggingFace cache. Nothing is ever downloaded. */
#ifndef CVX_MODEL_H
#define CVX_MODEL_H

#include <stddef.h>

/* If `id_or_dir` is an existing directory, use it. Otherwise treat it as ORG/NAME and look for
 * $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub:
 *   models--ORG--NAME/snapshots/<rev>/ with <rev> read from models--ORG--NAME/refs/main
 *   (or the only snapshot when there is no refs/main).
 * -1 + an error saying every place looked at. */
int cvx_model_resolve(const char *id_or_dir, char *out, size_t n);

/* "<model_dir>/<component>" (e.g. "transformer"), which must be a directory holding `file`
 * (e.g. "config.json") when file is non-NULL. -1 + error naming the missing path. */
int cvx_model_component(const char *model_dir, const char *component, const char *file, char *out, size_t n);

#endif
