// The only C++ in the project: a thin C wrapper around sentencepiece::SentencePieceProcessor.
#include "spm.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include <sentencepiece_processor.h>

// error.h is C11; its _Noreturn has a C++ spelling.
#define _Noreturn [[noreturn]]
extern "C" {
#include "error.h"
}

struct t5_spm {
    sentencepiece::SentencePieceProcessor proc;
};

extern "C" t5_spm *t5_spm_load(const char *path) {
    t5_spm *sp = new (std::nothrow) t5_spm;
    if (!sp) {
        cvx_error("%s: out of memory", path);
        return nullptr;
    }
    const auto status = sp->proc.Load(path);
    if (!status.ok()) {
        cvx_error("%s: cannot load sentencepiece model: %s", path, status.ToString().c_str());
        delete sp;
        return nullptr;
    }
    return sp;
}

extern "C" void t5_spm_free(t5_spm *sp) { delete sp; }

extern "C" int t5_spm_piece_count(const t5_spm *sp) { return sp->proc.GetPieceSize(); }

extern "C" int t5_spm_unk_id(const t5_spm *sp) { return sp->proc.unk_id(); }

extern "C" const char *t5_spm_piece(const t5_spm *sp, int id) { return sp->proc.IdToPiece(id).c_str(); }

extern "C" int t5_spm_piece_to_id(const t5_spm *sp, const char *piece) { return sp->proc.PieceToId(piece); }

extern "C" int t5_spm_encode(const t5_spm *sp, const char *text, size_t len, int **ids, int *n) {
    std::vector<int> out;
    const auto status = sp->proc.Encode(std::string(text, len), &out);
    if (!status.ok()) return cvx_error("sentencepiece: cannot encode text: %s", status.ToString().c_str());
    *n = (int)out.size();
    *ids = (int *)malloc(out.size() ? out.size() * sizeof(int) : 1);
    if (!*ids) return cvx_error("sentencepiece: out of memory");
    if (!out.empty()) memcpy(*ids, out.data(), out.size() * sizeof(int));
    return 0;
}
