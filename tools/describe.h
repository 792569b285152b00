/* cvx-inspect's description of a path as a JSON object (printed as is with --json, or as text by
 * describe_print): what it is (kind, stage, family, mode, step; for weights the family and
 * variant it would load as, parameter count, dtypes), its metadata, its fingerprint, and every
 * tensor with dtype, shape and statistics (min, max, mean, std, NaN / Inf counts). */
#ifndef CVX_TOOLS_DESCRIBE_H
#define CVX_TOOLS_DESCRIBE_H

#include <stdio.h>
#include <json-c/json.h>

typedef struct {
    int weight_stats;   /* statistics of model weights too (widens every tensor: slow on real models) */
} describe_opts;

/* NULL + cvx_error when the path cannot be read as what it is. */
json_object *describe_path(const char *path, const describe_opts *o);
void describe_print(FILE *out, json_object *d);

#endif
