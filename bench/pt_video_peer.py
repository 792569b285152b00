#!/usr/bin/env python3
"""The PyTorch peer for HunyuanVideo-1.5, Wan 2.2 and LTX-Video at the shapes of our benchmarks
(bench/side_by_side_video.sh): the upstream diffusers / transformers modules with random weights at the real
widths, timed on this CPU. This file only calls them: the upstream sources come from the peer set-up
(../shared/peer/README.md: refsrc_h15 = diffusers v0.36.0 + transformers 4.57 for HunyuanVideo-1.5,
refsrc_wan22 = diffusers v0.35.2 for Wan 2.2 and LTX-Video), imported through the peer's refenv_h15.py /
refenv_wan22.py (torch 1.13 stand-ins).

  /usr/bin/python3 bench/pt_video_peer.py --case CASE --dtype bf16|f32 [--runs 3] [--warmup 1] [--threads 2]
        [--frames F --height H --width W] [--layers 2] [--latent F,h,w] [--text 120] [--tokens 1108]
        [--save-dir DIR]
prints one JSON object {"median_s", "runs_s", "cpu_s" (median process CPU s), "attention_s", "peak_rss_gb", ...}.

  hv15      one HunyuanVideo15Transformer3DModel forward (one CFG branch, batch 1: bench_hv15's call): 8.3B widths,
            --layers double-stream blocks (2 refiner blocks), latent [1, 65, (F-1)/4+1, H/16, W/16], MLLM text
            1000 rows with --text valid, ByT5 256 rows all masked, image tokens zero (T2V)
  hv15vae   AutoencoderKLHunyuanVideo15 (real config) .decode of [1, 32, --latent], untiled (f32 only on torch 1.13:
            its replication_pad3d has no BFloat16 CPU kernel)
  qwen      Qwen2_5_VLTextModel (Qwen2.5-VL-7B text widths, --layers layers) on one prompt padded to --tokens
            (the pipeline's 108 + 1000) with --text valid tokens, output_hidden_states as the pipeline calls it
  wan5      one CFG step of WanTransformer3DModel at Wan2.2-TI2V-5B widths (2 forwards of batch 1, text 512),
            latent [1, 48, (F-1)/4+1, H/16, W/16]
  wan22vae  AutoencoderKLWan (Wan 2.2 config: z 48, base 160/256, residual, patch 2) .decode of [1, 48, --latent]
  ltx2b     one CFG step of LTXVideoTransformer3DModel at the 2B widths (ONE forward of batch 2, as LTXPipeline),
            latent (F-1)/8+1 x H/32 x W/32 tokens, text 128 (second half masked)
  ltxvae    AutoencoderKLLTXVideo (0.9.5 config, timestep-conditioned) .decode of [1, 128, --latent], t = 0.05

--save-dir DIR (hv15vae, ltxvae): also save the random module as DIR/config.json + diffusion_pytorch_model.safetensors (BF16), so that our
bench (bench_video_vae --model DIR) decodes with the same weights.

Attention: torch 1.13 has no fused CPU attention; the peer's shims compute the plain formula. Here SDPA is that
math (q k^T * scale + mask, softmax, * v, in the tensors' dtype; all-masked rows give 0 as torch >= 2.5) over blocks
of query rows, so the score matrix fits in memory; its time is reported apart."""
import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time

ap = argparse.ArgumentParser()
ap.add_argument("--case", required=True, choices=("hv15", "hv15vae", "qwen", "wan5", "wan22vae", "ltx2b", "ltxvae"))
ap.add_argument("--dtype", default="bf16", choices=("bf16", "f32"))
ap.add_argument("--runs", type=int, default=3)
ap.add_argument("--warmup", type=int, default=1)
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--frames", type=int, default=33)
ap.add_argument("--height", type=int, default=480)
ap.add_argument("--width", type=int, default=848)
ap.add_argument("--layers", type=int, default=2)
ap.add_argument("--latent", default="3,30,53")
ap.add_argument("--text", type=int, default=120)
ap.add_argument("--tokens", type=int, default=1108)
ap.add_argument("--vocab", type=int, default=152064)
ap.add_argument("--save-dir", default="")
ap.add_argument("--peer-dir", default=os.environ.get("PEER_DIR", os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "peer")))
a = ap.parse_args()
sys.path.insert(0, os.path.abspath(a.peer_dir))
if a.case in ("hv15", "hv15vae", "qwen"):
    import refenv_h15  # noqa: F401  (diffusers v0.36.0, transformers 4.57 on the path; torch 1.13 stand-ins)
else:
    import refenv_wan22  # noqa: F401  (diffusers v0.35.2)
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.set_num_threads(a.threads)
torch.manual_seed(0)
torch.use_deterministic_algorithms(False)
dt = {"bf16": torch.bfloat16, "f32": torch.float32}[a.dtype]
sdpa_time = [0.0]


def sdpa_blocked(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    assert dropout_p == 0.0
    t0 = time.perf_counter()
    if enable_gqa and key.size(-3) != query.size(-3):
        key = key.repeat_interleave(query.size(-3) // key.size(-3), dim=-3)
        value = value.repeat_interleave(query.size(-3) // value.size(-3), dim=-3)
    L, S = query.size(-2), key.size(-2)
    s = 1.0 / math.sqrt(query.size(-1)) if scale is None else scale
    rows = max(1, int((256 << 20) // (query[..., :1, :1].numel() * S * query.element_size())))   # ~256 MB of scores
    kt = key.transpose(-2, -1)
    out = torch.empty(query.shape[:-1] + (value.size(-1),), dtype=query.dtype)
    for i in range(0, L, rows):
        w = (query[..., i:i + rows, :] @ kt) * s
        if is_causal:
            cm = torch.ones(w.size(-2), S, dtype=torch.bool).tril(diagonal=i)
            w = w.masked_fill(cm.logical_not(), float("-inf"))
        if attn_mask is not None:
            m = attn_mask[..., i:i + rows, :] if attn_mask.dim() >= 2 and attn_mask.size(-2) == L else attn_mask
            w = w.masked_fill(m.logical_not(), float("-inf")) if m.dtype == torch.bool else w + m
        dead = torch.isneginf(w).all(dim=-1, keepdim=True)
        p = torch.softmax(w, dim=-1)
        if bool(dead.any()):
            p = p.masked_fill(dead, 0.0)
        out[..., i:i + rows, :] = p @ value
    sdpa_time[0] += time.perf_counter() - t0
    return out


F.scaled_dot_product_attention = sdpa_blocked
torch.nn.functional.scaled_dot_product_attention = sdpa_blocked


def timeit(fn):
    for i in range(a.warmup):
        t0 = time.perf_counter()
        fn()
        print("  warm-up %.2f s" % (time.perf_counter() - t0), file=sys.stderr, flush=True)
    ts, att, cpu = [], [], []
    for _ in range(a.runs):
        sdpa_time[0] = 0.0
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        ts.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        att.append(sdpa_time[0])
        print("  run %.2f s (attention %.2f s; CPU %.1f s; load %.1f)" % (ts[-1], att[-1], cpu[-1], os.getloadavg()[0]),
              file=sys.stderr, flush=True)
    return {"median_s": statistics.median(ts), "runs_s": ts, "attention_s": statistics.median(att),
            "cpu_s": statistics.median(cpu), "runs": a.runs, "warmup": a.warmup}


def peak_rss_gb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1e6
    return float("nan")


def latent():
    return tuple(int(s) for s in a.latent.split(","))


def save(mod):
    """config.json + diffusion_pytorch_model.safetensors (BF16, the published checkpoints' dtype), streamed
    tensor by tensor (save_pretrained through the pure-Python safetensors shim holds the whole file in memory)."""
    if not a.save_dir:
        return
    import struct
    os.makedirs(a.save_dir, exist_ok=True)
    mod.save_config(a.save_dir)
    sd = mod.state_dict()
    hdr, off = {"__metadata__": {"format": "pt"}}, 0
    for k, v in sd.items():
        nb = v.numel() * 2
        # 0-d parameters (the LTX decoder's timestep_scale_multiplier) as [1]: our loader refuses upstream's []
        # today (reported; the goldens were written with [1])
        hdr[k] = {"dtype": "BF16", "shape": list(v.shape) or [1], "data_offsets": [off, off + nb]}
        off += nb
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    path = os.path.join(a.save_dir, "diffusion_pytorch_model.safetensors")
    with open(path + ".part", "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for v in sd.values():
            f.write(v.detach().to(torch.bfloat16).contiguous().view(torch.int16).numpy().tobytes())
    os.replace(path + ".part", path)
    print("saved %s (%.2f GB)" % (a.save_dir, off / 1e9), file=sys.stderr, flush=True)


res = {"case": a.case, "torch": torch.__version__, "dtype": a.dtype, "threads": a.threads, "layers": a.layers}
with torch.no_grad():
    if a.case == "hv15":
        from diffusers import HunyuanVideo15Transformer3DModel
        m = HunyuanVideo15Transformer3DModel(num_layers=a.layers, task_type="t2v").eval().to(dt)
        lf, lh, lw = (a.frames - 1) // 4 + 1, a.height // 16, a.width // 16
        x = torch.randn(1, 65, lf, lh, lw).to(dt)
        txt = torch.randn(1, 1000, 3584).to(dt)
        mask = (torch.arange(1000) < a.text).long()[None]
        txt2 = torch.randn(1, 256, 1472).to(dt)
        mask2 = torch.zeros(1, 256, dtype=torch.long)
        img = torch.zeros(1, 729, 1152).to(dt)
        t = torch.tensor([937.5]).to(dt)   # the pipeline passes the timestep in the latents' dtype (time_embed casts to it)
        print("hv15 %s: latent [1,65,%d,%d,%d] = %d tokens, %d layers" % (a.dtype, lf, lh, lw, lf * lh * lw, a.layers),
              file=sys.stderr, flush=True)
        r = timeit(lambda: m(x, t, txt, mask, encoder_hidden_states_2=txt2, encoder_attention_mask_2=mask2,
                             image_embeds=img, return_dict=False)[0])
        r.update(tokens=lf * lh * lw)
    elif a.case == "qwen":
        from transformers import Qwen2_5_VLTextConfig, Qwen2_5_VLTextModel
        conf = Qwen2_5_VLTextConfig(vocab_size=a.vocab, hidden_size=3584, intermediate_size=18944,
                                    num_hidden_layers=a.layers, num_attention_heads=28, num_key_value_heads=4,
                                    max_position_embeddings=128000, rms_norm_eps=1e-6, rope_theta=1e6,
                                    rope_scaling={"type": "mrope", "mrope_section": [16, 24, 24]},
                                    attn_implementation="sdpa")
        m = Qwen2_5_VLTextModel(conf).eval().to(dt)
        ids = torch.randint(0, min(a.vocab, 150000), (1, a.tokens))
        mask = (torch.arange(a.tokens) < a.text).long()[None]
        print("qwen %s: %d tokens (%d valid), %d layers" % (a.dtype, a.tokens, a.text, a.layers), file=sys.stderr,
              flush=True)
        r = timeit(lambda: m(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states)
        r.update(tokens=a.tokens, valid=a.text)
    elif a.case == "wan5":
        from diffusers import WanTransformer3DModel
        m = WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=24, attention_head_dim=128, in_channels=48,
                                  out_channels=48, text_dim=4096, freq_dim=256, ffn_dim=14336, num_layers=a.layers,
                                  cross_attn_norm=True, qk_norm="rms_norm_across_heads", eps=1e-6).eval().to(dt)
        lf, lh, lw = (a.frames - 1) // 4 + 1, a.height // 16, a.width // 16
        x = torch.randn(1, 48, lf, lh, lw).to(dt)
        txt = [(torch.randn(1, 512, 4096) * 0.2).to(dt) for _ in range(2)]
        t = torch.tensor([999])
        S = lf * (lh // 2) * (lw // 2)
        print("wan5 %s: latent [1,48,%d,%d,%d] = %d tokens, %d layers" % (a.dtype, lf, lh, lw, S, a.layers),
              file=sys.stderr, flush=True)
        r = timeit(lambda: [m(x, t, e, return_dict=False)[0] for e in txt])
        r.update(tokens=S)
    elif a.case == "ltx2b":
        from diffusers import LTXVideoTransformer3DModel
        import diffusers.models.transformers.transformer_ltx as tl
        tl.is_torch_version = lambda op, ver: False   # its processor refuses torch < 2.0 only for lack of SDPA (above)
        m = LTXVideoTransformer3DModel(num_layers=a.layers).eval().to(dt)   # the defaults are the 2B widths
        lf, lh, lw = (a.frames - 1) // 8 + 1, a.height // 32, a.width // 32
        S = lf * lh * lw
        x = torch.randn(2, S, 128).to(dt)
        txt = (torch.randn(2, 128, 4096) * 0.2).to(dt)
        mask = (torch.arange(128) < 64).long()[None].repeat(2, 1)
        t = torch.tensor([999, 999])
        print("ltx2b %s: %dx%dx%d = %d tokens, batch 2, %d layers" % (a.dtype, lf, lh, lw, S, a.layers),
              file=sys.stderr, flush=True)
        r = timeit(lambda: m(x, txt, t, mask, num_frames=lf, height=lh, width=lw,
                             rope_interpolation_scale=(8 / 25, 32, 32), return_dict=False)[0])
        r.update(tokens=S)
    elif a.case == "hv15vae":
        from diffusers import AutoencoderKLHunyuanVideo15
        v = AutoencoderKLHunyuanVideo15().eval()
        save(v)
        v = v.to(dt)
        lf, lh, lw = latent()
        z = torch.randn(1, 32, lf, lh, lw).to(dt)
        r = timeit(lambda: v.decode(z).sample)
        r.update(latent=[lf, lh, lw])
    elif a.case == "wan22vae":
        from diffusers import AutoencoderKLWan
        v = AutoencoderKLWan(base_dim=160, decoder_base_dim=256, z_dim=48, is_residual=True, in_channels=12,
                             out_channels=12, patch_size=2, scale_factor_temporal=4, scale_factor_spatial=16,
                             latents_mean=[0.0] * 48, latents_std=[1.0] * 48).eval().to(dt)
        lf, lh, lw = latent()
        z = torch.randn(1, 48, lf, lh, lw).to(dt)
        r = timeit(lambda: v.decode(z).sample)
        r.update(latent=[lf, lh, lw])
    elif a.case == "ltxvae":
        from diffusers import AutoencoderKLLTXVideo
        v = AutoencoderKLLTXVideo(
            block_out_channels=(128, 256, 512, 1024, 2048), decoder_block_out_channels=(256, 512, 1024),
            layers_per_block=(4, 6, 6, 2, 2), decoder_layers_per_block=(5, 5, 5, 5),
            down_block_types=("LTXVideo095DownBlock3D",) * 4, spatio_temporal_scaling=(True, True, True, True),
            decoder_spatio_temporal_scaling=(True, True, True), decoder_inject_noise=(False, False, False, False),
            downsample_type=("spatial", "temporal", "spatiotemporal", "spatiotemporal"),
            upsample_residual=(True, True, True), upsample_factor=(2, 2, 2), timestep_conditioning=True,
            spatial_compression_ratio=32, temporal_compression_ratio=8).eval()
        save(v)
        v = v.to(dt)
        lf, lh, lw = latent()
        z = torch.randn(1, 128, lf, lh, lw).to(dt)
        temb = torch.tensor([0.05]).to(dt)
        r = timeit(lambda: v.decode(z, temb).sample)
        r.update(latent=[lf, lh, lw])
    r.update(peak_rss_gb=peak_rss_gb())
    res.update(r)
print(json.dumps(res))
