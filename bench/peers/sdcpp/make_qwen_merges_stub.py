#!/usr/bin/env python3
"""A stand-in for stable-diffusion.cpp's Qwen2 merges table (src/tokenizers/vocab/qwen_merges.hpp), whose blob the
mirrored snapshot lacks, so that sd.cpp's HunyuanVideo-1.5 text path sees as many tokens as with the real tokenizer.

Why: sd.cpp's Qwen2Tokenizer builds its whole vocabulary from that table (256 byte symbols, then one token per merge,
then the special tokens). With an empty table every character is a token: its HunyuanVideo-1.5 template (the
system block of conditioner.hpp, which it crops at a fixed 98 tokens) and the prompt become hundreds of tokens, and
the DiT sees another text length than ours. This script writes, for each word (Qwen2 pre-token) of the template and
of the benchmark prompt, the chain of merges that makes it one token ("s y", "sy s", ..., "Ġ a", "Ġa r", ...), in
order of first appearance, as the real tokenizer has these common words as single tokens. Token ids differ from the
real ones (random weights: only the count matters).

Mind: sd.cpp splits the table on '\\n' and drops the text after the last one; the table is written without a final
'\\n' (as in the build the benchmark ran), so the last merge ("assistan t") is dropped and "assistant" is 2 tokens.
The script prints the token counts sd.cpp will see (its pre-tokenizer and BPE, re-done here) and checks the template
crop: 98 tokens must end exactly at "<|im_start|>user\\n".

Usage: make_qwen_merges_stub.py PROMPT_FILE OUT.hpp      (PROMPT_FILE: bench/sdcpp_hv15_prompt.txt; OUT.hpp:
       <sd.cpp>/src/tokenizers/vocab/qwen_merges.hpp, then rebuild sd-cli)"""
import sys
import regex

# conditioner.hpp (97d2990), sd_version_is_hunyuan_video: the prompt is SYSTEM + text + SUFFIX, cropped at 98 tokens
SYSTEM = ("<|im_start|>system\nYou are a helpful assistant. Describe the video by detailing the following aspects:\n"
          "1. The main content and theme of the video.\n"
          "2. The color, shape, size, texture, quantity, text, and spatial relationships of the objects.\n"
          "3. Actions, events, behaviors temporal relationships, physical movement changes of the objects.\n"
          "4. background environment, light, style and atmosphere.\n"
          "5. camera angles, movements, and transitions used in the video.<|im_end|>\n"
          "<|im_start|>user\n")
SUFFIX = "<|im_end|>\n<|im_start|>assistant\n"
CROP = 98
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # the ones these texts use (qwen2_tokenizer.cpp has all)
# qwen2_tokenizer / tokenize_util.cpp's token_split
PRETOK = regex.compile(r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                       r"|\s*[\r\n]+|\s+(?!\S)|\s+")

def byte_unicode():
    """GPT-2's byte -> printable character map (sd.cpp's bytes_to_unicode)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}

BYTE = byte_unicode()

def pieces(text):
    """(is_special, byte-level string) per special token / pre-token, as sd.cpp's encode splits the text."""
    out, pat = [], regex.compile("(" + "|".join(regex.escape(s) for s in SPECIAL) + ")")
    for part in pat.split(text):
        if part in SPECIAL:
            out.append((True, part))
        elif part:
            out += [(False, "".join(BYTE[b] for b in t.encode())) for t in PRETOK.findall(part)]
    return out

def merges_for(text):
    merges, seen = [], set()
    for special, w in pieces(text):
        for i in range(1, len(w)):
            if special:
                break
            m = (w[:i], w[i])
            if m not in seen:
                seen.add(m)
                merges.append(m)
    return merges

def bpe(word, ranks):
    """sd.cpp's BPETokenizer::bpe: merge the lowest-ranked adjacent pair until none is left."""
    w = list(word)
    while len(w) > 1:
        pairs = [(ranks[(a, b)], i) for i, (a, b) in enumerate(zip(w, w[1:])) if (a, b) in ranks]
        if not pairs:
            break
        r = min(pairs)[0]
        a, b = [k for k, v in ranks.items() if v == r][0]
        nw, i = [], 0
        while i < len(w):
            if i + 1 < len(w) and w[i] == a and w[i + 1] == b:
                nw.append(a + b)
                i += 2
            else:
                nw.append(w[i])
                i += 1
        w = nw
    return w

def count(text, ranks):
    return sum(1 if special else len(bpe(w, ranks)) for special, w in pieces(text))

def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    prompt = open(sys.argv[1], encoding="utf-8").read().strip()
    merges = merges_for(SYSTEM + prompt + SUFFIX)
    table = "\n".join(a + " " + b for a, b in merges).encode()
    with open(sys.argv[2], "w") as f:
        f.write("// STUB Qwen2 merges for the benchmark texts (real blob missing from the mirror)\n"
                "static const unsigned char qwen2_merges_utf8_c_str[] = {\n%s\n};\n"
                % ",".join("0x%02x" % c for c in table))
    ranks = {m: r for r, m in enumerate(merges[:-1])}  # sd.cpp drops the line after the last '\n'
    n_sys, n_prompt, n_all = count(SYSTEM, ranks), count(prompt, ranks), count(SYSTEM + prompt + SUFFIX, ranks)
    print("%s: %d merges; sd.cpp's tokens: %d in all = template %d (cropped: %d) + prompt %d + suffix %d; "
          "%d text rows after the crop" % (sys.argv[2], len(merges), n_all, n_sys, CROP, n_prompt,
                                           n_all - n_sys - n_prompt, n_all - CROP))
    if n_sys != CROP:
        sys.exit("make_qwen_merges_stub.py: the template is %d tokens, sd.cpp crops %d" % (n_sys, CROP))

if __name__ == "__main__":
    main()
