#!/usr/bin/env python3
# Usage: python3 tests/data/sp_4heads/make.py   (writes transformer/ beside this script)
# The e2e_2b golden transformer's tiny config (tests/data/golden/e2e_2b/model/transformer) with 4
# attention heads instead of 3, and random f32 weights in the real diffusers layout: a model that
# `--sp 2` can split (sequence parallelism needs sp to divide the head count). tests/e2e_mpi.c
# puts it in a copy of the e2e_2b model (same text encoder, scheduler, VAE). Pure Python, seeded.
import array, json, os, random, sys
here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, '..', '..', '..', 'scripts'))
from safetensors_fixture import cogvideox_transformer_layout, write_safetensors_bytes

cfg = json.load(open(os.path.join(here, '..', 'golden', 'e2e_2b', 'model', 'transformer', 'config.json')))
cfg['num_attention_heads'] = 4
random.seed(11)
tensors = []
for name, shape, scale, offset in cogvideox_transformer_layout(cfg):
    n = 1
    for s in shape:
        n *= s
    data = array.array('f', [offset + scale * random.uniform(-1, 1) for _ in range(n)]).tobytes()
    tensors.append((name, 'F32', shape, data))
out = os.path.join(here, 'transformer')
os.makedirs(out, exist_ok=True)
json.dump(cfg, open(os.path.join(out, 'config.json'), 'w'), indent=2, sort_keys=True)
write_safetensors_bytes(os.path.join(out, 'diffusion_pytorch_model.safetensors'), tensors)
