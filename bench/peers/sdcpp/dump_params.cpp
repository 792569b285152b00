// dump_params.cpp: the tensors stable-diffusion.cpp's own model classes expect, for the six models the
// side-by-side video benchmark runs in sd.cpp (bench/side_by_side_video.sh, PART=hv15|wan22):
//   hvdit    HunyuanVideo-1.5 480p T2V DiT   Hunyuan::HunyuanVideoRunner   prefix model.diffusion_model
//   hvvae    HunyuanVideo-1.5 VAE (decoder)  Hunyuan::HunyuanVideoVAERunner prefix first_stage_model
//   qwen     Qwen2.5-VL-7B text model        LLM::LLMRunner (QWEN2_5_VL)   prefix text_encoders.llm
//   umt5     UMT5-XXL encoder                T5Runner (is_umt5)            prefix text_encoders.t5xxl.transformer
//   wan22dit Wan2.2-TI2V-5B DiT              WAN::WanRunner                prefix model.diffusion_model
//   wan22vae Wan 2.2 VAE (encoder+decoder)   WAN::WanVAERunner             prefix first_stage_model
// Output, one line per tensor, sorted by model then name:  <model> <name> <f16|f32> <d0,d1,...>
// with the shape in torch order (ggml's ne reversed, trailing 1s dropped: a Conv3d weight is the 4-D
// [out*in, kd, kh, kw] the safetensors loader makes of a 5-D file tensor). The dtype is what sd.cpp
// allocates when the file does not say (its class defaults, or the seed's type below); make_sd_random.py
// chooses the file dtypes itself.
//
// The runners size themselves from the file's tensors (detect_from_weights): each gets a few "seed" tensor
// descriptions (name, type, ne) with the real model's widths and LAYERS blocks / layers, nothing else.
// No weight is allocated or read.
//
// Build (against the built library of the sd.cpp tree; SD = its source root, B = its cmake build dir), one line:
//   g++ -O1 -std=gnu++17 -DGGML_MAX_NAME=160 -DGGML_USE_CPU -I$SD -I$SD/src -I$SD/include -I$SD/src/core
//       -I$SD/thirdparty -I$SD/ggml/include dump_params.cpp -o dump_params $B/libstable-diffusion.a
//       $B/ggml/src/libggml.a $B/ggml/src/libggml-cpu.a $B/ggml/src/libggml-base.a -fopenmp -lpthread
// Usage: dump_params [LAYERS] > params.txt      (LAYERS: 2 by default: the HV1.5 double blocks, Qwen layers,
//        UMT5 blocks; the Wan2.2 DiT always has its 30 blocks, see below; make_sd_random.py rebuilds any count)
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "model/diffusion/hunyuan.hpp"
#include "model/diffusion/wan.hpp"
#include "model/te/llm.hpp"
#include "model/te/t5.hpp"
#include "model/vae/hunyuan_vae.hpp"
#include "model/vae/wan_vae.hpp"

namespace {

struct Seed {
    std::string name;
    ggml_type type;
    std::vector<int64_t> ne;  // ggml order (innermost first)
};

String2TensorStorage seed_map(const std::string& prefix, const std::vector<Seed>& seeds) {
    String2TensorStorage map;
    for (const Seed& s : seeds) {
        std::string name = prefix + "." + s.name;
        map[name]        = TensorStorage(name, s.type, s.ne.data(), static_cast<int>(s.ne.size()), 0);
    }
    return map;
}

std::string layer(const char* fmt, int i) {
    char buf[256];
    snprintf(buf, sizeof(buf), fmt, i);
    return buf;
}

void print(const char* model, const std::map<std::string, ggml_tensor*>& tensors) {
    for (const auto& [name, t] : tensors) {
        printf("%s %s %s ", model, name.c_str(), ggml_type_name(t->type));
        for (int d = ggml_n_dims(t) - 1; d >= 0; d--) {
            printf("%lld%s", static_cast<long long>(t->ne[d]), d > 0 ? "," : "\n");
        }
    }
}

}  // namespace

int main(int argc, char** argv) {
    const int L = argc > 1 ? atoi(argv[1]) : 2;
    if (L < 1) {
        fprintf(stderr, "dump_params: LAYERS must be >= 1 (got '%s')\n", argv[1]);
        return 2;
    }
    const int last   = L - 1;
    ggml_backend_t be = sd_backend_cpu_init();
    std::map<std::string, ggml_tensor*> t;

    {  // HunyuanVideo-1.5 480p T2V: 2048 wide, 16 heads of 128, mlp 4x, 65 input channels (latent, cond latent,
       // mask), patch 1, Qwen width 3584, the cond-type embedding; L double blocks, no single blocks, no ByT5
        const std::string p = "model.diffusion_model";
        auto map            = seed_map(p, {{"img_in.proj.weight", GGML_TYPE_F16, {1, 1, 1, 65, 2048}},
                                           {"txt_in.input_embedder.weight", GGML_TYPE_F16, {3584, 2048}},
                                           {"double_blocks.0.img_attn.norm.key_norm.scale", GGML_TYPE_F32, {128}},
                                           {"double_blocks.0.img_mlp.0.weight", GGML_TYPE_F16, {2048, 8192}},
                                           {layer("double_blocks.%d.img_attn.qkv.bias", 0), GGML_TYPE_F32, {6144}},
                                           {layer("double_blocks.%d.img_attn.qkv.bias", last), GGML_TYPE_F32, {6144}},
                                           {"final_layer.linear.weight", GGML_TYPE_F16, {2048, 32}},
                                           {"cond_type_embedding.weight", GGML_TYPE_F16, {2048, 3}}});
        Hunyuan::HunyuanVideoRunner r(be, map, p, VERSION_HUNYUAN_VIDEO);
        t.clear();
        r.get_param_tensors(t, p);
        print("hvdit", t);
    }
    {  // its VAE: fixed widths; the decoder only (sd.cpp builds the encoder only if the file has one)
        Hunyuan::HunyuanVideoVAERunner r(be, {}, "first_stage_model", true, VERSION_HUNYUAN_VIDEO);
        t.clear();
        r.get_param_tensors(t);
        print("hvvae", t);
    }
    {  // Qwen2.5-VL-7B language model: 3584 wide, 18944 MLP, vocab 152064, L layers, no vision tower
        const std::string p = "text_encoders.llm";
        auto map            = seed_map(p, {{"model.embed_tokens.weight", GGML_TYPE_F16, {3584, 152064}},
                                           {"model.layers.0.mlp.gate_proj.weight", GGML_TYPE_F16, {3584, 18944}},
                                           {layer("model.layers.%d.self_attn.q_proj.weight", last), GGML_TYPE_F16, {3584, 3584}}});
        LLM::LLMRunner r(LLM::LLMArch::QWEN2_5_VL, be, map, p);
        t.clear();
        r.get_param_tensors(t, p);
        print("qwen", t);
    }
    {  // UMT5-XXL encoder: 4096 wide, 64 heads, 10240 gated FFN, vocab 256384, L blocks
        const std::string p = "text_encoders.t5xxl.transformer";
        auto map            = seed_map(p, {{"shared.weight", GGML_TYPE_F16, {4096, 256384}},
                                           {"encoder.block.0.layer.0.SelfAttention.q.weight", GGML_TYPE_F16, {4096, 4096}},
                                           {"encoder.block.0.layer.1.DenseReluDense.wi_0.weight", GGML_TYPE_F16, {4096, 10240}},
                                           {layer("encoder.block.%d.layer.0.SelfAttention.q.weight", last), GGML_TYPE_F16, {4096, 4096}}});
        T5Runner r(be, map, p, true);
        t.clear();
        r.get_param_tensors(t, p);
        print("umt5", t);
    }
    {  // Wan2.2-TI2V-5B: sd.cpp takes every width from its version and block count, and knows the 5B only
       // with 30 blocks (2 with README.md's patch; any other count aborts): always 30 blocks here
        const std::string p = "model.diffusion_model";
        auto map            = seed_map(p, {{"blocks.29.self_attn.q.weight", GGML_TYPE_F16, {3072, 3072}}});
        WAN::WanRunner r(be, map, p, VERSION_WAN2_2_TI2V);
        t.clear();
        r.get_param_tensors(t, p);
        print("wan22dit", t);
    }
    {  // Wan 2.2 VAE (z 48, patch 2): fixed widths, encoder and decoder as sd.cpp loads them
        WAN::WanVAERunner r(be, {}, "first_stage_model", false, VERSION_WAN2_2_TI2V);
        t.clear();
        r.get_param_tensors(t);
        print("wan22vae", t);
    }
    ggml_backend_free(be);
    return 0;
}
