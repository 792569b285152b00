#!/usr/bin/env python3
"""Write tests/data/ftfy/cases.json: inputs and what the real ftfy 6.3.1 / html / regex make of
them, for tests/stage1_prompt_clean.c (beyond the 12 golden prompts).

    PYTHONPATH=/path/to/python-ftfy-6.3.1 python3 scripts/gen_ftfy_cases.py

Each case: "input" (text) or "input_hex" (raw bytes, read as bytes.decode("utf-8", "replace")),
and the outputs "fix_text", "fix_encoding", "unescape_html" (ftfy.fixes), "html_unescape"
(html.unescape), "is_bad", "prompt_clean" (diffusers' WanPipeline prompt_clean). The inputs: one
or more per ftfy rule (written out below), then seeded random mixes of mojibake (text encoded as
UTF-8 and read back in each codec ftfy knows, up to three times), entities and odd characters.
"""
import html
import html.entities
import json
import os
import random
import sys

import ftfy
import regex
from ftfy import badness, chardata, fixes

assert ftfy.__version__ == "6.3.1", ftfy.__version__
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "ftfy", "cases.json")


def prompt_clean(text):
    text = html.unescape(html.unescape(ftfy.fix_text(text))).strip()
    return regex.sub(r"\s+", " ", text).strip()


RULES = [
    # fix_encoding through each codec
    "cafÃ© crÃ¨me brÃ»lÃ©e", "â€” â€œquotedâ€\x9d â€¦", "Ã la mode, Ã quelle heure, Ã quele", "voilÃ le travail",
    "РџСЂРёРІРµС‚ РјРёСЂ", "Å»Ã³Å‚w", "Ã…Ã‚Ã¤", "ÎšÎ±Î»Î·Î¼Î­ÏÎ±", "Ä°stanbul'da", "Ä…Ä™", "ÄŒeÅ¡tina",
    "‚Äö√Ñ√¥ macroman", "├⌐t├⌐ cp437", "â€œ like this â€�", "Ã¡ ? Ã¡", "í ½í¸€ CESU-8 emoji", "nul: À\x80 java",
    "schÃ¶n und Ã¼bel", "Ã¢â‚¬â„¢ two layers", "ÃƒÂ©tÃƒÂ© three", "ãƒ¡ã‚¤ãƒ³ãƒšãƒ¼ã‚¸", "ðŸ˜€ ðŸ¼",
    # decode_inconsistent_utf8, latin-1 read as windows-1252, C1 controls
    "Ã©tÃ© — été mixed", "This is a \x93quote\x94 and \x85", "\x80 \x81 \x8d \x9f", "café \x96 dash",
    # unescape_html and html.unescape
    "&amp;amp;amp; &lt;3 &quot;x&quot; &#39;y&#39;", "P&EACUTE;REZ BUNDESSTRA&SZLIG;E &ntilde; &NTILDE; &nTILDE;",
    "&#x2019;s &#8217;s &#128; &#0; &#xD800; &#x110000; &#12ab; &#x;", "&notit; &notin &amp &ampx &AMP;",
    "a < b &amp; c", "line one &amp;\nline <two> &amp;\nline three &amp;", "&Jscr;ohn &HilbertSpace;ancock &checkmark;",
    # character fixers
    "ﬁsh ﬂower ﬀ ﬃ ﬄ ﬅ ﬆ Ĳ ǆ ŉ", "ＬＯＵＤ\u3000ＮＯＩＳＥＳ ｶﾞｷﾞ ￣ ￠", "“curly” ‘single’ ʼ ‛ ‟",
    "a\r\nb\rc\u2028d\u2029e\x85f", "\x1b[36;44mblue\x1b[0m \x1b[m \x1b[1;x", "bom\ufeff ctl\x01\x07\x0b\x1f\x7f \u206a\ufff9\ufffc",
    "e\u0301 A\u030a \u1100\u1161", "tab\tvt\x0bff\x0c", "zero\u200bwidth nbsp\u00a0ideo\u3000end\u2003",
    # the golden prompts' kinds
    "色调艳丽，过曝，静态", "🐼🎸 Привет мир! γειά σου κόσμε, مرحبا", "   ", "", "x",
]
RAW = [b"\xff caf\xc3 \xed\xa0\x80 \xc0\x80 \xe2\x82", b"\xf0\x9f\x98\x80\x80\xbf", b"ok \xc3\xa9 \xe2\x80\x94",
       b"\xc3\x83\xc2\xa9", b"\xf4\x90\x80\x80 \xf5", b"a\x00b"]


def random_inputs(rng, count):
    specials = set(map(chr, range(0x80, 0x100)))
    for v in list(badness.MOJIBAKE_CATEGORIES.values()) + list(chardata.UTF8_CLUES.values()):
        rx = regex.compile("[" + v + "]")
        specials.update(c for c in map(chr, range(0x80, 0x2700)) if rx.match(c))
    specials = sorted(specials)
    ascii_ = [chr(c) for c in range(0x20, 0x7F)] + ["\n", "\t", " ", " "]
    words = ["café", "naïve", "Straße", "à la mode", "Ελληνικά", "русский", "日本語", "“q”", "—", "…", "🐼",
             "ﬁ", "ＦＵＬＬ", "ｶﾀｶﾅ", "\u3000", "\u00a0", "e\u0301", "\x1b[31m", "\ufeff", "\u200b", "\x1a", "\ufffd",
             "&amp;", "&lt;", "&#39;", "&eacute;", "&EACUTE;", "<", "?"]
    encs = chardata.CHARMAP_ENCODINGS + ["windows-1252"]

    def text(k):
        out = []
        for _ in range(k):
            r = rng.random()
            out.append(rng.choice(ascii_) if r < 0.45 else rng.choice(specials) if r < 0.7 else rng.choice(words))
        return "".join(out)

    def mojibake(t):
        for _ in range(rng.choice([1, 1, 2, 3])):
            try:
                t = t.encode("utf-8").decode(rng.choice(encs), errors=rng.choice(["strict", "replace"]))
            except UnicodeDecodeError:
                continue
            if rng.random() < 0.2:
                t = t.replace("\xa0", " ")
        return t

    out = []
    for _ in range(count):
        t = text(rng.randrange(1, 24))
        out.append(mojibake(t) if rng.random() < 0.6 else t)
    return out


def case(text, raw=None):
    c = {"input_hex": raw.hex()} if raw is not None else {"input": text}
    c.update({"fix_text": ftfy.fix_text(text), "fix_encoding": ftfy.fix_encoding(text),
              "unescape_html": fixes.unescape_html(text), "html_unescape": html.unescape(text),
              "is_bad": badness.is_bad(text), "prompt_clean": prompt_clean(text)})
    return c


rng = random.Random(20261126)
cases = [case(t) for t in RULES + random_inputs(rng, 300) if "\x00" not in t]
cases += [case(b.decode("utf-8", "replace"), b) for b in RAW]
os.makedirs(os.path.dirname(OUT), exist_ok=True)
with open(OUT, "w", encoding="utf-8") as f:
    json.dump({"generator": "scripts/gen_ftfy_cases.py", "ftfy": ftfy.__version__,
               "python": sys.version.split()[0], "cases": cases}, f, ensure_ascii=False, indent=0)
print("wrote %s: %d cases, %d changed by fix_text" % (OUT, len(cases), sum(c["fix_text"] != c.get("input") for c in cases)))
