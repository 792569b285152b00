#!/usr/bin/env python3
"""Give the embedded tiny model (models/cogvideox-tiny-random) the genuine T5 v1.1 tokenizer.

The tiny model is the golden e2e_5b model, whose tokenizer is an 800-piece stand-in. Real
CogVideoX checkpoints ship the 32000-piece T5 v1.1 spiece.model (golden README §13), so this
script makes `make run` tokenize prompts as the real models do:

  tokenizer/spiece.model           the genuine file (tests/data/tokenizer_t5_genuine/spiece.model)
  tokenizer/tokenizer_config.json  added_tokens_decoder: <pad> 0, </s> 1, <unk> 2,
                                   <extra_id_N> = 32099 - N (T5Tokenizer, extra_ids = 100)
  tokenizer/added_tokens.json      <extra_id_N> -> 32099 - N
  text_encoder/config.json         vocab_size 32128 (32000 + 100 extra ids + 28 padding rows, as T5-XXL)
  text_encoder/model.safetensors   shared.weight [32128, d_model] BF16, N(0, 1) (T5's init, factor 1.0)
                                   from Python's random.Random(20261123); every other tensor is the
                                   golden e2e_5b text encoder's, unchanged (F32)

Standard library only. Run from the repository root:
    python3 scripts/make_tiny_model_tokenizer.py
"""
import json
import os
import random
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_fixture import f32_values, read_safetensors, write_safetensors  # noqa: E402

MODEL = "models/cogvideox-tiny-random"
GOLDEN_TE = "tests/data/golden/e2e_5b/model/text_encoder"
SPIECE = "tests/data/tokenizer_t5_genuine/spiece.model"
PIECES, EXTRA_IDS, VOCAB = 32000, 100, 32128
SEED = 20261123


def added_token(content, strip):
    return {"content": content, "lstrip": strip, "normalized": False, "rstrip": strip, "single_word": False,
            "special": True}


def tokenizer_files():
    tok = os.path.join(MODEL, "tokenizer")
    shutil.copy(SPIECE, os.path.join(tok, "spiece.model"))
    path = os.path.join(tok, "tokenizer_config.json")
    with open(path) as f:
        cfg = json.load(f)
    dec = {"0": added_token("<pad>", False), "1": added_token("</s>", False), "2": added_token("<unk>", False)}
    for i in range(EXTRA_IDS):
        dec[str(PIECES + i)] = added_token("<extra_id_%d>" % (EXTRA_IDS - 1 - i), True)
    cfg["added_tokens_decoder"] = dec
    cfg["extra_ids"] = EXTRA_IDS
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    added = {"<extra_id_%d>" % n: PIECES + EXTRA_IDS - 1 - n for n in range(EXTRA_IDS)}
    with open(os.path.join(tok, "added_tokens.json"), "w") as f:
        json.dump(dict(sorted(added.items())), f, indent=2)
        f.write("\n")


def text_encoder_files():
    te = os.path.join(MODEL, "text_encoder")
    with open(os.path.join(GOLDEN_TE, "config.json")) as f:
        cfg = json.load(f)
    cfg["vocab_size"] = VOCAB
    with open(os.path.join(te, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    src = read_safetensors(os.path.join(GOLDEN_TE, "model.safetensors"))
    d_model = cfg["d_model"]
    rng = random.Random(SEED)
    entries = []
    for name, (dtype, shape, raw) in src.items():
        if name == "shared.weight":
            entries.append((name, "BF16", [VOCAB, d_model], [rng.gauss(0.0, 1.0) for _ in range(VOCAB * d_model)]))
        else:
            assert dtype == "F32", name
            entries.append((name, "F32", shape, list(f32_values(raw))))
    write_safetensors(os.path.join(te, "model.safetensors"), entries)


def main():
    if not os.path.isdir(MODEL) or not os.path.isfile(SPIECE):
        sys.exit("run from the repository root (needs %s and %s)" % (MODEL, SPIECE))
    tokenizer_files()
    text_encoder_files()
    print("%s: genuine T5 tokenizer, shared.weight [%d, d_model] BF16" % (MODEL, VOCAB))


if __name__ == "__main__":
    main()
