#!/usr/bin/env python3
"""Generate stage1/ftfy_tables.{h,c}: the data of ftfy 6.3.1 and of Python's html module that
stage1/ftfy.c and stage1/html_unescape.c implement, read from the upstream sources themselves.

    PYTHONPATH=/path/to/python-ftfy-6.3.1 python3 scripts/gen_ftfy_tables.py

(ftfy needs `wcwidth` importable; nothing else). What is generated, and from where:
  * the regular expressions ftfy's fix_encoding runs (badness.BADNESS_RE, chardata.UTF8_DETECTOR_RE,
    chardata.ALTERED_UTF8_RE, chardata.LOSSY_UTF8_RE), parsed with Python's own regex parser into
    alternatives of fixed items (character sets, \\s, \\w, '.', an optional item, a ^ anchor); the
    C matcher runs these tables. The shapes the C code hard-codes (UTF8_DETECTOR_RE's lookbehind and
    repetition, A_GRAVE_WORD_RE, ANSI_RE, the encoding detectors) are asserted here;
  * the single-byte codecs ftfy tries (chardata.CHARMAP_ENCODINGS, ftfy's sloppy-* codecs);
  * LIGATURES, WIDTH_MAP, CONTROL_CHARS;
  * html.entities.html5, ftfy's extra upper-case entities, html's invalid charref tables.
Sets cover the code points Python's regexes match; a class that negates or names a category is
asserted to be one the C side implements.
"""
import html
import html.entities
import os
import re
import re._parser as sre_parse
import sys
import unicodedata

import ftfy
from ftfy import badness, chardata, fixes
from ftfy.bad_codecs import utf8_variants

assert ftfy.__version__ == "6.3.1", ftfy.__version__

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_H = os.path.join(HERE, "..", "stage1", "ftfy_tables.h")
OUT_C = os.path.join(HERE, "..", "stage1", "ftfy_tables.c")

C_ESC = {ord('"'): '\\"', ord("\\"): "\\\\"}


def c_str(s):
    """A C string literal holding the UTF-8 bytes of s (octal escapes: never absorb a digit)."""
    out = []
    for b in s.encode("utf-8"):
        if 0x20 <= b < 0x7F and b not in C_ESC:
            out.append(chr(b))
        elif b in C_ESC:
            out.append(C_ESC[b])
        else:
            out.append("\\%03o" % b)
    return '"' + "".join(out) + '"'


def ranges_of(cps):
    cps = sorted(set(cps))
    out = []
    for c in cps:
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return [tuple(r) for r in out]


# ---------------------------------------------------------------- sets and patterns

sets = []          # list of (ranges tuple, negate)
set_index = {}


def set_id(ranges, negate=False):
    key = (tuple(ranges), negate)
    if key not in set_index:
        set_index[key] = len(sets)
        sets.append(key)
    return set_index[key]


def class_set(items):
    """An IN class of sre_parse -> ('set', id) or a category kind."""
    negate = False
    cps = []
    cats = []
    for op, av in items:
        name = str(op)
        if name == "NEGATE":
            negate = True
        elif name == "LITERAL":
            cps.append(av)
        elif name == "RANGE":
            cps.extend(range(av[0], av[1] + 1))
        elif name == "CATEGORY":
            cats.append(str(av))
        else:
            raise ValueError("unsupported class item %s" % name)
    if cats:
        assert not cps and not negate and len(cats) == 1, items
        return {"CATEGORY_SPACE": "SPACE", "CATEGORY_WORD": "WORD", "CATEGORY_DIGIT": "DIGIT"}[cats[0]], 0
    return "SET", set_id(ranges_of(cps), negate)


def item_of(op, av):
    name = str(op)
    if name == "IN":
        kind, sid = class_set(av)
        return (kind, sid, 0)
    if name == "LITERAL":
        return ("SET", set_id([(av, av)]), 0)
    if name == "ANY":
        return ("ANY", 0, 0)
    if name == "MAX_REPEAT":
        lo, hi, sub = av
        assert (lo, hi) == (0, 1) and len(sub) == 1, av
        kind, sid, _ = item_of(*sub[0])
        return (kind, sid, 1)
    raise ValueError("unsupported item %s" % name)


def alternatives(pattern, flags):
    """A pattern that is one BRANCH (or one sequence) of fixed items -> list of alternatives."""
    p = sre_parse.parse(pattern, flags).data
    if len(p) == 1 and str(p[0][0]) == "BRANCH":
        alts = p[0][1][1]
    else:
        alts = [sre_parse.SubPattern(None, p)]
    out = []
    for alt in alts:
        anchored = 0
        items = []
        for op, av in alt.data:
            if str(op) == "AT":
                assert str(av) == "AT_BEGINNING" and not items
                anchored = 1
                continue
            items.append(item_of(op, av))
        out.append((anchored, items))
    return out


badness_alts = alternatives(badness.BADNESS_RE.pattern, badness.BADNESS_RE.flags)
altered_alts = alternatives(chardata.ALTERED_UTF8_RE.pattern, chardata.ALTERED_UTF8_RE.flags)
lossy_alts = alternatives(chardata.LOSSY_UTF8_RE.pattern, chardata.LOSSY_UTF8_RE.flags)
for alts in (altered_alts, lossy_alts):   # byte patterns: no categories, no anchors
    assert all(not a and all(k == "SET" and not o for k, _, o in items) for a, items in alts)

# UTF8_DETECTOR_RE = (?<![strict]) ( [f2][cont] | [f3][cont]{2} | [f4][cont]{3} )+ : C hard-codes
# this shape; take the sets from the parse and check the shape.
d = sre_parse.parse(chardata.UTF8_DETECTOR_RE.pattern, chardata.UTF8_DETECTOR_RE.flags).data
assert len(d) == 2 and str(d[0][0]) == "ASSERT_NOT" and d[0][1][0] == -1
assert str(d[1][0]) == "MAX_REPEAT" and d[1][1][0] == 1 and str(d[1][1][1]) == "MAXREPEAT"
(lb_op, lb_av), = d[0][1][1].data
assert str(lb_op) == "IN"
_, utf8_strict = class_set(lb_av)
(sp_op, sp_av), = d[1][1][2].data
assert str(sp_op) == "SUBPATTERN"
(br_op, br_av), = sp_av[3].data
assert str(br_op) == "BRANCH" and len(br_av[1]) == 3
firsts = []
cont = None
for k, alt in enumerate(br_av[1]):
    (f_op, f_av), rest = alt.data[0], alt.data[1:]
    assert str(f_op) == "IN"
    firsts.append(class_set(f_av)[1])
    if k == 0:
        (c_op, c_av), = rest
        assert str(c_op) == "IN"
        cont = class_set(c_av)[1]
    else:
        (r_op, (lo, hi, sub)), = rest
        assert str(r_op) == "MAX_REPEAT" and lo == hi == k + 1
        assert class_set(sub[0][1])[1] == cont
assert chardata.UTF8_CLUES["utf8_continuation_strict"] and utf8_strict != cont
# ftfy.c's utf8_detector_at rejects an ASCII start before reading the sets
assert all(not sets[f][1] and sets[f][0][0][0] >= 0x80 for f in firsts)

# Shapes hard-coded in C.
assert fixes.A_GRAVE_WORD_RE.pattern == b"\xc3 (?! |quele|quela|quilo|s )"
assert fixes.ANSI_RE.pattern == "\033\\[((?:\\d|;)*)([a-zA-Z])"
assert chardata.C1_CONTROL_RE.pattern == r"[\x80-\x9f]"
assert chardata.SINGLE_QUOTE_RE.pattern == "[\u02bc\u2018-\u201b]"
assert chardata.DOUBLE_QUOTE_RE.pattern == "[\u201c-\u201f]"
assert chardata.HTML_ENTITY_RE.pattern == r"&#?[0-9A-Za-z]{1,24};"
assert utf8_variants.SPECIAL_BYTES_RE.pattern == (
    b"(\xc0(\x80|$))|(\xed([\xa0-\xaf]|$)([\x80-\xbf]|$)(\xed|$)([\xb0-\xbf]|$)([\x80-\xbf]|$))"
    b"|(\xed([\xa0-\xbf]|$)([\x80-\xbf]|$))")

# ---------------------------------------------------------------- codecs

codecs_out = []
for enc in chardata.CHARMAP_ENCODINGS:
    table = [ord(c) for c in bytes(range(256)).decode(enc)]
    assert len(table) == 256
    hi = [table[b] for b in range(0x80, 0x100)] + [table[0x1A]]
    assert len(set(table)) == 256, enc          # a bijection: encoding is the inverse lookup
    assert all(table[b] == b for b in range(0x80) if b != 0x1A), enc   # ASCII encodes to itself
    # chardata.possible_encoding: ^[\x00-\x19\x1b-\x7f{decoded 0x80..0xff, 0x1a}]*$
    p = sre_parse.parse(chardata.ENCODING_REGEXES[enc].pattern).data
    allowed = set()
    for op, av in p[1][1][2][0][1]:
        if str(op) == "LITERAL":
            allowed.add(av)
        else:
            allowed.update(range(av[0], av[1] + 1))
    assert allowed == (set(range(0x80)) - {0x1A}) | set(hi), enc
    codecs_out.append((enc, table))

# ftfy.c reads strict Windows-1252 (Latin-1 text re-decoded) off the sloppy table: a byte in
# 0x80..0x9F the sloppy codec maps to itself is one Windows-1252 leaves undefined.
assert chardata.CHARMAP_ENCODINGS[0] == "latin-1" and chardata.CHARMAP_ENCODINGS[1] == "sloppy-windows-1252"
sloppy1252 = codecs_out[1][1]
for b in range(0x80, 0xA0):
    try:
        strict = ord(bytes([b]).decode("windows-1252"))
    except UnicodeDecodeError:
        strict = None
    assert (strict is None) == (sloppy1252[b] == b) and (strict is None or strict == sloppy1252[b]), b

# ---------------------------------------------------------------- translate tables

ligatures = sorted(chardata.LIGATURES.items())
width_map = sorted(chardata.WIDTH_MAP.items())
control_ranges = ranges_of(chardata.CONTROL_CHARS.keys())
assert all(v is None for v in chardata.CONTROL_CHARS.values())

# ---------------------------------------------------------------- HTML

html5 = sorted(html.entities.html5.items())
ftfy_upper = []
for ent, val in sorted(chardata.HTML_ENTITIES.items()):
    name = ent[1:]
    if name in html.entities.html5:
        assert html.entities.html5[name] == val
    else:
        ftfy_upper.append((name, val))
invalid_charrefs = sorted(html._invalid_charrefs.items())
invalid_codepoints = ranges_of(html._invalid_codepoints)

# ---------------------------------------------------------------- output

KIND = {"SET": "FTFY_ITEM_SET", "SPACE": "FTFY_ITEM_SPACE", "WORD": "FTFY_ITEM_WORD", "ANY": "FTFY_ITEM_ANY"}
max_items = max(len(items) for alts in (badness_alts, altered_alts, lossy_alts) for _, items in alts)

header = f"""/* GENERATED by scripts/gen_ftfy_tables.py from ftfy {ftfy.__version__} and Python {sys.version.split()[0]}'s html
 * module (Unicode {unicodedata.unidata_version}): do not edit. The data stage1/ftfy.c and stage1/html_unescape.c run. */
#ifndef CVX_STAGE1_FTFY_TABLES_H
#define CVX_STAGE1_FTFY_TABLES_H

#include <stddef.h>
#include <stdint.h>

/* A set of code points (or bytes): sorted inclusive ranges, maybe negated. */
typedef struct {{ uint32_t lo, hi; }} ftfy_range;
typedef struct {{ uint16_t first, count; uint8_t negate; }} ftfy_set;
#define FTFY_N_SETS {len(sets)}
extern const ftfy_range ftfy_set_ranges[];
extern const ftfy_set ftfy_sets[FTFY_N_SETS];

/* One item of a regex alternative: a set, or Python re's \\s (str.isspace), \\w (isalnum or '_'),
 * \\d (isdecimal), '.' (anything but '\\n'); `optional` = the item followed by '?' (greedy). */
enum {{ FTFY_ITEM_SET, FTFY_ITEM_SPACE, FTFY_ITEM_WORD, FTFY_ITEM_DIGIT, FTFY_ITEM_ANY }};
typedef struct {{ uint8_t kind, optional; uint16_t set; }} ftfy_item;
#define FTFY_MAX_ITEMS {max_items}
/* An alternative: its items in order; `anchored` = preceded by ^ (start of the text only). */
typedef struct {{ uint8_t anchored, n; ftfy_item item[FTFY_MAX_ITEMS]; }} ftfy_alt;
/* Which alternatives may start at a character: sorted disjoint ranges, each with the mask of the
 * alternatives (bit i = alternative i) whose first character can lie in it. */
typedef struct {{ uint32_t lo, hi; uint64_t alts; }} ftfy_first;
/* An alternation, tried in order at each position (Python re: the first alternative that matches
 * wins), of at most 64 alternatives; `first`: the ranges above; `always`: the alternatives whose
 * first item is \\s, \\w, \\d or '.', tried at every position. */
typedef struct {{ const ftfy_alt *alt; int n; const ftfy_first *first; int n_first; uint64_t always; }} ftfy_branch;

extern const ftfy_branch ftfy_badness_re;      /* badness.BADNESS_RE */
extern const ftfy_branch ftfy_altered_utf8_re; /* chardata.ALTERED_UTF8_RE (bytes) */
extern const ftfy_branch ftfy_lossy_utf8_re;   /* chardata.LOSSY_UTF8_RE (bytes) */
/* chardata.UTF8_DETECTOR_RE = (?<![STRICT])([FIRST2][CONT]|[FIRST3][CONT]{{2}}|[FIRST4][CONT]{{3}})+ */
#define FTFY_SET_UTF8_STRICT {utf8_strict}
#define FTFY_SET_UTF8_FIRST2 {firsts[0]}
#define FTFY_SET_UTF8_FIRST3 {firsts[1]}
#define FTFY_SET_UTF8_FIRST4 {firsts[2]}
#define FTFY_SET_UTF8_CONT {cont}

/* chardata.CHARMAP_ENCODINGS in ftfy's order: byte -> code point (the sloppy-* codecs as ftfy
 * builds them: holes filled with the Latin-1 character, 0x1A -> U+FFFD). */
#define FTFY_N_CODECS {len(codecs_out)}
#define FTFY_N_ENCODE 129
typedef struct {{ uint32_t cp, byte; }} ftfy_encode;
/* decode: byte -> code point; encode: the inverse for bytes 0x80..0xFF and 0x1A, sorted by code
 * point (every other byte is ASCII and encodes to itself). */
typedef struct {{ const char *name; uint32_t decode[256]; ftfy_encode encode[FTFY_N_ENCODE]; }} ftfy_codec;
extern const ftfy_codec ftfy_codecs[FTFY_N_CODECS];

/* A code point mapped to a string (UTF-8). */
typedef struct {{ uint32_t cp; const char *utf8; }} ftfy_cp_map;
#define FTFY_N_LIGATURES {len(ligatures)}
extern const ftfy_cp_map ftfy_ligatures[FTFY_N_LIGATURES];   /* chardata.LIGATURES */
#define FTFY_N_WIDTH {len(width_map)}
extern const ftfy_cp_map ftfy_width_map[FTFY_N_WIDTH];       /* chardata.WIDTH_MAP */
#define FTFY_N_CONTROL {len(control_ranges)}
extern const ftfy_range ftfy_control_chars[FTFY_N_CONTROL];  /* chardata.CONTROL_CHARS */

/* A named character reference: name (without '&') -> UTF-8, sorted by name (strcmp). */
typedef struct {{ const char *name, *utf8; }} html_entity;
#define HTML5_N_ENTITIES {len(html5)}
extern const html_entity html5_entities[HTML5_N_ENTITIES];   /* html.entities.html5 */
#define FTFY_N_UPPER_ENTITIES {len(ftfy_upper)}
extern const html_entity ftfy_upper_entities[FTFY_N_UPPER_ENTITIES]; /* chardata.HTML_ENTITIES minus html5 */
#define HTML_N_INVALID_CHARREFS {len(invalid_charrefs)}
extern const ftfy_cp_map html_invalid_charrefs[HTML_N_INVALID_CHARREFS];   /* html._invalid_charrefs */
#define HTML_N_INVALID_CODEPOINTS {len(invalid_codepoints)}
extern const ftfy_range html_invalid_codepoints[HTML_N_INVALID_CODEPOINTS]; /* html._invalid_codepoints */

#endif
"""

c = []
c.append(f"/* GENERATED by scripts/gen_ftfy_tables.py from ftfy {ftfy.__version__} and Python {sys.version.split()[0]}: do not edit. */")
c.append('#include "ftfy_tables.h"\n')
c.append("const ftfy_range ftfy_set_ranges[] = {")
offsets = []
pos = 0
for ranges, neg in sets:
    offsets.append(pos)
    for k in range(0, len(ranges), 8):
        c.append("    " + " ".join("{0x%x, 0x%x}," % r for r in ranges[k:k + 8]))
    pos += len(ranges)
c.append("};")
c.append("const ftfy_set ftfy_sets[] = {")
for i, (ranges, neg) in enumerate(sets):
    c.append("    {%d, %d, %d}, /* %d */" % (offsets[i], len(ranges), int(neg), i))
c.append("};\n")


def first_index(alts):
    """Which alternatives can start at which character: the first items of each alternative (an
    optional item and the one after it) -> sorted disjoint ranges with the mask of alternatives
    that may start there, and the mask of those whose first item is a category or '.' (tried
    everywhere). Exact: an alternative outside both masks cannot match at that character."""
    assert len(alts) <= 64
    always = 0
    edges = {0, 0x110000}
    starts = []   # (ranges, bit)
    for i, (_, items) in enumerate(alts):
        assert any(not o for _, _, o in items), "an alternative with only optional items"
        for k, sid, o in items:
            if k != "SET":
                always |= 1 << i
            else:
                ranges, neg = sets[sid]
                if neg:   # the complement in [0, 0x10ffff]
                    comp, lo = [], 0
                    for a, b in ranges:
                        if a > lo:
                            comp.append((lo, a - 1))
                        lo = b + 1
                    if lo <= 0x10FFFF:
                        comp.append((lo, 0x10FFFF))
                    ranges = comp
                starts.append((ranges, 1 << i))
                for a, b in ranges:
                    edges.update((a, b + 1))
            if not o:
                break
    edges = sorted(edges)
    out = []
    for a, b in zip(edges, edges[1:]):
        m = 0
        for ranges, bit in starts:
            if any(lo <= a and b - 1 <= hi for lo, hi in ranges):
                m |= bit
        if not m:
            continue
        if out and out[-1][1] == a - 1 and out[-1][2] == m:
            out[-1][1] = b - 1
        else:
            out.append([a, b - 1, m])
    return out, always


def emit_branch(cname, name, alts, source):
    c.append(f"static const ftfy_alt {cname}_alts[] = {{")
    for anchored, items in alts:
        its = ", ".join("{%s, %d, %d}" % (KIND[k], o, s) for k, s, o in items)
        c.append("    {%d, %d, {%s}}," % (anchored, len(items), its))
    c.append("};")
    first, always = first_index(alts)
    c.append(f"static const ftfy_first {cname}_first[] = {{")
    for k in range(0, len(first), 4):
        c.append("    " + " ".join("{0x%x, 0x%x, 0x%xull}," % tuple(r) for r in first[k:k + 4]))
    c.append("};")
    c.append(f"const ftfy_branch {name} = {{{cname}_alts, {len(alts)}, {cname}_first, {len(first)}, 0x%xull}}; /* {source} */\n" % always)


emit_branch("badness", "ftfy_badness_re", badness_alts, "badness.BADNESS_RE")
emit_branch("altered", "ftfy_altered_utf8_re", altered_alts, "chardata.ALTERED_UTF8_RE")
emit_branch("lossy", "ftfy_lossy_utf8_re", lossy_alts, "chardata.LOSSY_UTF8_RE")

c.append("const ftfy_codec ftfy_codecs[FTFY_N_CODECS] = {")
for enc, table in codecs_out:
    c.append('    {"%s", {' % enc)
    for r in range(0, 256, 16):
        c.append("        " + " ".join("0x%x," % v for v in table[r:r + 16]))
    c.append("    }, {")
    # the inverse for the bytes that are not plain ASCII (0x80..0xFF and 0x1A), sorted by code point
    enc_pairs = sorted((table[b], b) for b in list(range(0x80, 0x100)) + [0x1A])
    for r in range(0, len(enc_pairs), 8):
        c.append("        " + " ".join("{0x%x, 0x%x}," % e for e in enc_pairs[r:r + 8]))
    c.append("    }},")
c.append("};\n")


def emit_cp_map(name, size, items):
    c.append(f"const ftfy_cp_map {name}[{size}] = {{")
    for cp, s in items:
        c.append("    {0x%x, %s}," % (cp, c_str(s)))
    c.append("};")


emit_cp_map("ftfy_ligatures", "FTFY_N_LIGATURES", ligatures)
emit_cp_map("ftfy_width_map", "FTFY_N_WIDTH", width_map)
c.append("const ftfy_range ftfy_control_chars[FTFY_N_CONTROL] = {")
c.append("    " + " ".join("{0x%x, 0x%x}," % r for r in control_ranges))
c.append("};\n")

for cname, size, items in (("html5_entities", "HTML5_N_ENTITIES", html5),
                           ("ftfy_upper_entities", "FTFY_N_UPPER_ENTITIES", ftfy_upper)):
    c.append(f"const html_entity {cname}[{size}] = {{")
    for name, val in items:
        c.append("    {%s, %s}," % (c_str(name), c_str(val)))
    c.append("};")
emit_cp_map("html_invalid_charrefs", "HTML_N_INVALID_CHARREFS", invalid_charrefs)
c.append("const ftfy_range html_invalid_codepoints[HTML_N_INVALID_CODEPOINTS] = {")
c.append("    " + " ".join("{0x%x, 0x%x}," % r for r in invalid_codepoints))
c.append("};")

with open(OUT_H, "w") as f:
    f.write(header)
with open(OUT_C, "w") as f:
    f.write("\n".join(c) + "\n")
print("wrote %s and %s: %d sets, %d badness alternatives, %d html5 entities" %
      (OUT_H, OUT_C, len(sets), len(badness_alts), len(html5)))
