#!/usr/bin/env python3
"""Write a full-size random-weight LTX-Video 2B (0.9.7 / 0.9.8 distilled layout) model directory in the
diffusers layout, for the whole-video timing in docs/performance.md ("LTX-Video 2B distilled, full size"):

  transformer/   LTXVideoTransformer3DModel, 28 layers, 32 heads x 64 (2048), caption 4096      (bf16, ~3.8 GB)
  text_encoder/  T5EncoderModel, T5 v1.1 XXL dims (d_model 4096, 24 layers, 64 x 64, d_ff 10240) (bf16, ~9.5 GB)
  vae/           AutoencoderKLLTXVideo, the 0.9.5 / 0.9.7 timestep-conditioned config              (bf16)
  tokenizer/     the golden stand-in tokenizer (its ids are < 32128)
  scheduler/     FlowMatchEulerDiscreteScheduler, static shift 1 (0.9.5+)
  model_index.json  LTXPipeline

The configs are those of ../shared/golden_ltx/real_configs.md (diffusers' convert_ltx_to_diffusers.py).
Tensor names and shapes come from upstream's own classes (diffusers / transformers of ../shared/peer/refsrc_h15),
built without initialising their weights (nothing touched, so nothing resident); the values are random:
matrices / convolutions N(0, 1/fan_in), T5's token embedding N(0, 1) (its relative-position bias N(0, 0.1^2)),
biases N(0, 0.02^2), norm weights 1, and the values the constructors set themselves (scale_shift_table,
timestep_scale_multiplier as the 0-d tensor diffusers saves, latents_mean/std) kept. --only rewrites some
components (e.g. the T5 file alone); the small test model of the same widths: --layers 2 --t5-layers 1.

  /usr/bin/python3 scripts/make_ltx_full_model.py OUT_DIR [--layers 28] [--t5-layers 24] [--only transformer,...]

Runs with Debian's python3 (torch 1.13 + numpy); writes safetensors itself (no safetensors package).
"""
import argparse
import json
import os
import shutil
import struct
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEER = os.environ.get("CVX_PEER", os.path.join(ROOT, "..", "shared", "peer"))
GOLDEN = os.environ.get("CVX_GOLDEN_LTX", os.path.join(ROOT, "..", "shared", "golden_ltx"))

TRANSFORMER = {
    "_class_name": "LTXVideoTransformer3DModel", "_diffusers_version": "0.35.2",
    "activation_fn": "gelu-approximate", "attention_bias": True, "attention_head_dim": 64,
    "attention_out_bias": True, "caption_channels": 4096, "cross_attention_dim": 2048, "in_channels": 128,
    "norm_elementwise_affine": False, "norm_eps": 1e-6, "num_attention_heads": 32, "num_layers": 28,
    "out_channels": 128, "patch_size": 1, "patch_size_t": 1, "qk_norm": "rms_norm_across_heads",
}
VAE = {
    "_class_name": "AutoencoderKLLTXVideo", "_diffusers_version": "0.35.2",
    "in_channels": 3, "out_channels": 3, "latent_channels": 128,
    "block_out_channels": [128, 256, 512, 1024, 2048],
    "down_block_types": ["LTXVideo095DownBlock3D"] * 4,
    "downsample_type": ["spatial", "temporal", "spatiotemporal", "spatiotemporal"],
    "layers_per_block": [4, 6, 6, 2, 2], "spatio_temporal_scaling": [True] * 4,
    "decoder_block_out_channels": [256, 512, 1024], "decoder_layers_per_block": [5, 5, 5, 5],
    "decoder_spatio_temporal_scaling": [True] * 3, "decoder_inject_noise": [False] * 4,
    "upsample_residual": [True] * 3, "upsample_factor": [2, 2, 2], "timestep_conditioning": True,
    "patch_size": 4, "patch_size_t": 1, "resnet_norm_eps": 1e-6, "scaling_factor": 1.0,
    "encoder_causal": True, "decoder_causal": False,
    "spatial_compression_ratio": 32, "temporal_compression_ratio": 8,
}
T5 = {
    "architectures": ["T5EncoderModel"], "classifier_dropout": 0.0, "d_ff": 10240, "d_kv": 64, "d_model": 4096,
    "decoder_start_token_id": 0, "dense_act_fn": "gelu_new", "dropout_rate": 0.1, "eos_token_id": 1,
    "feed_forward_proj": "gated-gelu", "initializer_factor": 1.0, "is_encoder_decoder": True,
    "is_gated_act": True, "layer_norm_epsilon": 1e-6, "model_type": "t5", "num_decoder_layers": 24,
    "num_heads": 64, "num_layers": 24, "pad_token_id": 0, "relative_attention_max_distance": 128,
    "relative_attention_num_buckets": 32, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.46.0.dev0", "use_cache": True, "vocab_size": 32128,
}


def upstream():
    """Import upstream's classes with weight initialisation switched off (shapes only, nothing touched)."""
    sys.path.insert(0, PEER)
    import refenv_h15  # noqa: F401  (puts refsrc_h15 on the path)
    import torch
    for name in ("uniform_", "normal_", "trunc_normal_", "kaiming_uniform_", "kaiming_normal_", "xavier_uniform_",
                 "xavier_normal_", "zeros_", "ones_", "constant_", "orthogonal_"):
        setattr(torch.nn.init, name, lambda t, *a, **k: t)
    if not hasattr(torch.nn, "RMSNorm"):  # torch < 2.4: a stand-in with the same parameters (never run here)
        class RMSNorm(torch.nn.Module):
            def __init__(self, dim, eps=None, elementwise_affine=True, **kw):
                super().__init__()
                if elementwise_affine:
                    self.weight = torch.nn.Parameter(torch.ones(dim))
        torch.nn.RMSNorm = RMSNorm
    from diffusers import AutoencoderKLLTXVideo, LTXVideoTransformer3DModel
    import diffusers.models.transformers.transformer_ltx as tl
    tl.is_torch_version = lambda *a: False  # its processor's torch >= 2.0 check (the processor never runs here)
    import transformers
    from transformers import T5Config, T5EncoderModel
    transformers.modeling_utils.PreTrainedModel.post_init = lambda self: None
    return torch, LTXVideoTransformer3DModel, AutoencoderKLLTXVideo, T5Config, T5EncoderModel


class Pool:
    """Random bf16 tensors sliced from one N(0, 1) draw: per (scale, offset) a pool of 16 M bf16 values is made
    once (a fresh draw per element would take most of an hour on this loaded machine); each tensor is a run of
    it from a random start (wrapping)."""

    def __init__(self, n=1 << 24, seed=0):
        self.rng = np.random.default_rng(seed)
        self.n, self.z, self.cache = n, self.rng.standard_normal(n, dtype=np.float32), {}

    def chunks(self, numel, scale, offset):
        key = (float(scale), float(offset))
        if key not in self.cache:
            b = np.frombuffer(bf16_bytes(self.z * np.float32(scale) + np.float32(offset)), dtype=np.uint16)
            self.cache[key] = np.concatenate([b, b])
        p, done = self.cache[key], 0
        while done < numel:
            m = min(self.n, numel - done)
            s = int(self.rng.integers(self.n))
            yield p[s:s + m]
            done += m


def bf16_bytes(x):
    """float32 -> bf16, round to nearest even (as torch's .to(bfloat16))."""
    u = x.astype(np.float32).view(np.uint32)
    u = u + (np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1)))
    return (u >> 16).astype(np.uint16).tobytes()


def plan(torch, model):
    """[(name, shape, how)] in state-dict order; how = ('rand', scale, offset) or ('value', tensor)."""
    owner = {}
    for mname, mod in model.named_modules():
        for pname, _ in mod.named_parameters(recurse=False):
            owner[(mname + "." if mname else "") + pname] = mod
    out, seen = [], set()
    for name, t in model.state_dict(keep_vars=True).items():
        if t.data_ptr() in seen:  # tied (T5's encoder.embed_tokens = shared): written once, as upstream saves
            continue
        seen.add(t.data_ptr())
        mod = owner.get(name)
        shape = list(t.shape)
        kind = type(mod).__name__ if mod is not None else ""
        leaf = name.rsplit(".", 1)[-1]
        if mod is None or not (isinstance(mod, (torch.nn.Linear, torch.nn.Conv3d, torch.nn.Conv2d, torch.nn.Conv1d,
                                                  torch.nn.Embedding)) or "Norm" in kind):
            out.append((name, shape, ("value", t.detach())))  # set by the constructor itself
        elif "Norm" in kind:
            out.append((name, shape, ("rand", 0.0, 1.0 if leaf == "weight" else 0.0)))
        elif leaf == "bias":
            out.append((name, shape, ("rand", 0.02, 0.0)))
        elif isinstance(mod, torch.nn.Embedding):
            out.append((name, shape, ("rand", 1.0 if shape[0] > 1000 else 0.1, 0.0)))
        else:
            fan_in = int(np.prod(shape[1:]))
            out.append((name, shape, ("rand", fan_in ** -0.5, 0.0)))
    return out


def write_safetensors(path, entries, pool):
    header, off = {}, 0
    for name, shape, _ in entries:
        n = int(np.prod(shape)) if shape else 1
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [off, off + 2 * n]}
        off += 2 * n
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    tmp = path + ".part"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for name, shape, how in entries:
            n = int(np.prod(shape)) if shape else 1
            if how[0] == "value":
                v = how[1].to(dtype=how[1].dtype).float().numpy().reshape(-1)
                if not np.all(np.isfinite(v)):
                    sys.exit(f"{path}: {name}: constructor value not finite")
                f.write(bf16_bytes(v))
            elif how[1] == 0.0:
                f.write(bf16_bytes(np.full(n, how[2], dtype=np.float32)))
            else:
                for x in pool.chunks(n, how[1], how[2]):
                    f.write(x.tobytes())
    os.replace(tmp, path)
    return off


def write_component(out, sub, fname, config, model, torch, pool):
    d = os.path.join(out, sub)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    entries = plan(torch, model)
    nbytes = write_safetensors(os.path.join(d, fname), entries, pool)
    print(f"{sub}: {len(entries)} tensors, {nbytes / 2:.4g} parameters, {nbytes / 1e9:.2f} GB bf16", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=28, help="transformer layers (28 = the real 2B)")
    ap.add_argument("--t5-layers", type=int, default=24, help="T5 encoder layers (24 = the real XXL)")
    ap.add_argument("--only", default="transformer,text_encoder,vae", help="components to (re)write")
    a = ap.parse_args()
    torch, LTXT, LTXVAE, T5Config, T5Enc = upstream()
    pool = Pool()
    os.makedirs(a.out, exist_ok=True)
    only = a.only.split(",")
    cfg_tr = dict(TRANSFORMER, num_layers=a.layers)
    cfg_vae = dict(VAE)
    cfg_t5 = dict(T5, num_layers=a.t5_layers)
    if "transformer" in only:
        m = LTXT(**{k: v for k, v in cfg_tr.items() if not k.startswith("_")})
        write_component(a.out, "transformer", "diffusion_pytorch_model.safetensors", cfg_tr, m, torch, pool)
        del m
    if "vae" in only:
        m = LTXVAE(**{k: v for k, v in cfg_vae.items() if not k.startswith("_")})
        write_component(a.out, "vae", "diffusion_pytorch_model.safetensors", cfg_vae, m, torch, pool)
        del m
    if "text_encoder" in only:
        m = T5Enc(T5Config(**cfg_t5))
        write_component(a.out, "text_encoder", "model.safetensors", cfg_t5, m, torch, pool)
        del m
    src = os.path.join(GOLDEN, "e2e_t2v_tsvae", "model")
    for sub in ("tokenizer", "scheduler"):
        shutil.copytree(os.path.join(src, sub), os.path.join(a.out, sub), dirs_exist_ok=True)
    shutil.copy(os.path.join(src, "model_index.json"), os.path.join(a.out, "model_index.json"))


if __name__ == "__main__":
    main()
