#!/usr/bin/env python3
"""Make a sharded BF16 copy of a single-file F32 safetensors checkpoint, in the layout real
diffusers/transformers checkpoints use: <stem>-0000K-of-0000N.safetensors + <stem>.safetensors.index.json.
Usage: make_sharded_fixture.py SRC.safetensors OUT_DIR STEM NUM_SHARDS
(tests/data/sharded_2b was made with: golden/transformer_2b/.../diffusion_pytorch_model.safetensors
 tests/data/sharded_2b diffusion_pytorch_model 2)"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_fixture import bf16_value, f32_values, read_safetensors, write_index, write_safetensors  # noqa: E402


def main():
    src, out_dir, stem, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    tensors = read_safetensors(src)
    names = sorted(tensors)
    os.makedirs(out_dir, exist_ok=True)
    weight_map, total = {}, 0
    for k in range(n):
        fname = f"{stem}-{k + 1:05d}-of-{n:05d}.safetensors"
        entries = [(name, "BF16", tensors[name][1], [bf16_value(v) for v in f32_values(tensors[name][2])])
                   for name in names[k::n]]
        total += write_safetensors(os.path.join(out_dir, fname), entries)
        weight_map.update({e[0]: fname for e in entries})
    write_index(os.path.join(out_dir, f"{stem}.safetensors.index.json"), weight_map, total)


if __name__ == "__main__":
    main()
