#!/usr/bin/env python3
"""Make the stage-1 test fixtures from the golden tiny T5.

  tests/data/stage1/t5_bf16_sharded/text_encoder/      the golden weights as a 2-shard BF16 checkpoint
      with a model.safetensors.index.json, the embedding stored as 'encoder.embed_tokens.weight'
      (the other T5 naming) and encoder.final_layer_norm.weight as F16
  tests/data/stage1/t5_bf16_rounded_f32/text_encoder/  the same rounded values as one F32 file, so
      the sharded/bf16 path can be checked exactly

Run from the repository root: python3 scripts/make_t5_fixtures.py
"""
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_fixture import bf16_value, f16_value, f32_values, read_safetensors, write_index, write_safetensors  # noqa: E402

SRC = "tests/data/golden/t5/model/text_encoder"
OUT = "tests/data/stage1"


def main():
    src = read_safetensors(os.path.join(SRC, "model.safetensors"))
    sharded = os.path.join(OUT, "t5_bf16_sharded", "text_encoder")
    rounded = os.path.join(OUT, "t5_bf16_rounded_f32", "text_encoder")
    for d in (sharded, rounded):
        os.makedirs(d, exist_ok=True)
        shutil.copy(os.path.join(SRC, "config.json"), d)
    shards, flat = {1: [], 2: []}, []
    for name in sorted(src):
        _, shape, raw = src[name]
        dtype = "F16" if name == "encoder.final_layer_norm.weight" else "BF16"
        vals = [f16_value(v) if dtype == "F16" else bf16_value(v) for v in f32_values(raw)]
        out_name = "encoder.embed_tokens.weight" if name == "shared.weight" else name
        shard = 2 if name.startswith(("encoder.block.1.", "encoder.final_layer_norm")) else 1
        shards[shard].append((out_name, dtype, shape, vals))
        flat.append((name, "F32", shape, vals))
    weight_map, total = {}, 0
    for k, entries in shards.items():
        fname = "model-%05d-of-00002.safetensors" % k
        total += write_safetensors(os.path.join(sharded, fname), entries)
        weight_map.update({e[0]: fname for e in entries})
    write_index(os.path.join(sharded, "model.safetensors.index.json"), weight_map, total)
    write_safetensors(os.path.join(rounded, "model.safetensors"), flat)


if __name__ == "__main__":
    main()
