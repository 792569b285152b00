# cogvideox.c — build, test, run.
#   make            build bin/stage1 bin/stage2 bin/stage3
#   make test       build and run every test (cmocka)
#   make asan       the same tests under AddressSanitizer + UBSan (build-asan/)
#   make deps       install the Debian packages the build needs
#   make run PROMPT="..."   the whole pipeline (see README.md)
#   make bench      benchmarks (time, GFLOP/s, peak RSS)
# Several builds can share the tree: BUILD=dir selects the object directory.

BUILD   ?= build
CC      ?= gcc
CXX     ?= g++
# Baseline x86-64 with AVX2/FMA/F16C: AVX-512 and bf16 code is compiled per function
# (__attribute__((target))) and chosen at run time (common/cpu.c), never by -march luck.
OPT     ?= -O2 -mavx2 -mfma -mf16c
SAN     ?=
# -ffp-contract=off: no silent FMA contraction, so results do not depend on the compiler's
# whim (the torch-exact RNG needs it; the rest loses nothing measurable, GEMMs are BLAS).
CFLAGS_BASE = -std=gnu11 $(OPT) -g -fopenmp -ffp-contract=off -Wall -Wextra -Wno-unused-parameter \
              -Icommon -I. $(shell pkg-config --cflags json-c 2>/dev/null) -MMD -MP $(SAN)
CXXFLAGS_BASE = -std=c++17 $(OPT) -g -fopenmp -ffp-contract=off -Wall -Wextra -Icommon -I. -MMD -MP $(SAN)

# OpenBLAS: prefer Debian's OpenMP build so BLAS and our loops share one thread pool.
OPENBLAS_OMP_DIR := /usr/lib/x86_64-linux-gnu/openblas-openmp
ifneq ($(wildcard $(OPENBLAS_OMP_DIR)/libopenblas.so),)
BLAS_LIBS = -L$(OPENBLAS_OMP_DIR) -Wl,-rpath,$(OPENBLAS_OMP_DIR) -lopenblas
else
BLAS_LIBS = -lopenblas
endif
LIBS = -fopenmp $(SAN) $(shell pkg-config --libs json-c 2>/dev/null || echo -ljson-c) $(BLAS_LIBS) -ldnnl \
       -lsentencepiece $(shell pkg-config --libs icu-uc 2>/dev/null || echo -licuuc -licudata) \
       -lavformat -lavcodec -lswscale -lavutil -lm -lpthread

# ---- MPI (optional, issue 11) ---------------------------------------------------------------
# Detected as llm.c does: Open MPI's flags from pkg-config (ompi-c) or mpicc, used only when
# mpi.h compiles with them; NO_MPI=1 builds without (and says so). Switching between
# the two needs `make clean` (or another BUILD=dir): objects do not depend on these flags.
ifeq ($(NO_MPI),1)
  HAVE_MPI :=
  $(info MPI: disabled (NO_MPI=1); the programs run on one rank)
else
  MPI_CFLAGS := $(shell pkg-config --cflags ompi-c 2>/dev/null || mpicc --showme:compile 2>/dev/null)
  MPI_LIBS   := $(shell pkg-config --libs ompi-c 2>/dev/null || mpicc --showme:link 2>/dev/null)
  HAVE_MPI   := $(shell printf '\#include <mpi.h>\n' | $(CC) $(MPI_CFLAGS) -E -x c - >/dev/null 2>&1 && echo 1)
  ifeq ($(HAVE_MPI),1)
    CFLAGS_BASE += -DCVX_USE_MPI $(MPI_CFLAGS)
    LIBS        += $(MPI_LIBS)
  else
    $(info MPI: not found (no mpi.h); building for one rank. For several: apt install libopenmpi-dev)
  endif
endif
# MPI test programs (tests/mpi/*.c), run under mpirun by tests/common_dist; built only with MPI.
MPI_TEST_SRC  := $(if $(HAVE_MPI),$(wildcard tests/mpi/*.c))
MPI_TEST_BINS := $(patsubst tests/mpi/%.c,$(BUILD)/tests/mpi/%,$(MPI_TEST_SRC))
$(BUILD)/tests/mpi/%: $(BUILD)/tests/mpi/%.c.o $(BUILD)/libcvx.a
	$(CXX) -o $@ $^ $(LIBS)
.DEFAULT_GOAL := all
tests-build: $(MPI_TEST_BINS)
# make run NP=2 [HOSTS=hostfile] [SP=...]: stage 2 and 3 under mpirun (docs/distributed.md).
# NP ranks: stage 2 with --cfg_parallel, and with SP=N also --sp N (NP = 2 × N), or --sp N alone
# when NP = N (sequence parallelism without the CFG split); stage 3 shares its tiles;
# THREADS applies per rank. MPIRUN_FLAGS adds mpirun options (e.g. --bind-to none -x OMP_NUM_THREADS).
NP           ?= 1
HOSTS        ?=
SP           ?=
MPIRUN_FLAGS ?=
# as root (containers, CI) Open MPI refuses to start without --allow-run-as-root: added, and said
IS_ROOT      := $(filter 0,$(shell id -u 2>/dev/null))
MPI_RUN      = $(if $(filter-out 1,$(NP)),mpirun -q -np $(NP) $(if $(IS_ROOT),--allow-run-as-root) \
               $(if $(HOSTS),--hostfile $(HOSTS)) $(MPIRUN_FLAGS))
MPI_ROOT_NOTE = $(if $(and $(filter-out 1,$(NP)),$(IS_ROOT)),@echo "note: running as root: mpirun gets \
                --allow-run-as-root (Open MPI refuses root without it)")
STAGE2_MPI   = $(if $(filter-out 1,$(NP)),$(if $(filter $(NP),$(SP)),--sp $(SP),--cfg_parallel $(if $(filter-out 1,$(SP)),--sp $(SP))))
# ---- end of MPI --------------------------------------------------------------------------

COMMON_SRC := $(wildcard common/*.c) $(wildcard common/*.cc)
COMMON_OBJ := $(patsubst %,$(BUILD)/%.o,$(COMMON_SRC))
LIBCVX     := $(BUILD)/libcvx.a

stage_src = $(filter-out $(1)/main.c,$(wildcard $(1)/*.c) $(wildcard $(1)/*.cc))
stage_obj = $(patsubst %,$(BUILD)/%.o,$(call stage_src,$(1)))
STAGES := stage1 stage2 stage3
PROGRAMS := $(addprefix bin/,$(STAGES))
# The pipeline library (pipeline/) over the stage libraries over libcvx: every program, test,
# benchmark and example links all of them (static archives: only what is used is pulled in).
LIBPIPELINE := $(BUILD)/libpipeline.a
ALL_LIBS := $(LIBPIPELINE) $(BUILD)/libstage1.a $(BUILD)/libstage2.a $(BUILD)/libstage3.a $(LIBCVX)
$(LIBPIPELINE): $(patsubst %,$(BUILD)/%.o,$(wildcard pipeline/*.c))
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

TEST_SRC  := $(wildcard tests/*.c)
TEST_BINS := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRC))

.SECONDARY:
.PHONY: all test asan deps clean bench bench-all fuzz run pipeline stage1 stage2 stage3 redecode help FORCE tests-build test-run
all: $(PROGRAMS)

$(BUILD)/%.c.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) -c $< -o $@
$(BUILD)/%.cc.o: %.cc
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS_BASE) $(CXXFLAGS) -c $< -o $@

$(LIBCVX): $(COMMON_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

define STAGE_RULES
$(BUILD)/lib$(1).a: $(call stage_obj,$(1))
	@mkdir -p $$(dir $$@)
	rm -f $$@ && ar rcs $$@ $$^
$(BUILD)/bin/$(1): $(BUILD)/$(1)/main.c.o $(ALL_LIBS)
	@mkdir -p $$(dir $$@)
	$(CXX) -o $$@ $$^ $(LIBS)
endef
$(foreach s,$(STAGES),$(eval $(call STAGE_RULES,$(s))))

# bin/ holds the programs of the default build.
bin/%: $(BUILD)/bin/%
	@mkdir -p bin
	cp $< $@

# Tests link every library (whatever their name).
$(BUILD)/tests/%: $(BUILD)/tests/%.c.o $(ALL_LIBS)
	$(CXX) -o $@ $^ -lcmocka $(LIBS)

# Examples: examples/*.c, built by `make test` and run on the embedded tiny model.
EXAMPLE_SRC  := $(wildcard examples/*.c)
EXAMPLE_BINS := $(patsubst examples/%.c,$(BUILD)/examples/%,$(EXAMPLE_SRC))
$(BUILD)/examples/%: $(BUILD)/examples/%.c.o $(ALL_LIBS)
	$(CXX) -o $@ $^ $(LIBS)

# Benchmarks: bench/*.c, each its own program linked with every stage.
BENCH_SRC  := $(wildcard bench/*.c)
BENCH_BINS := $(patsubst bench/%.c,$(BUILD)/bench/%,$(BENCH_SRC))
$(BUILD)/bench/%: $(BUILD)/bench/%.c.o $(ALL_LIBS)
	$(CXX) -o $@ $^ $(LIBS)
# make bench: the machine's measured f32, bf16 and int8 peaks and each op family's share of them
# (bench_kernels quick: linears, attention, a VAE conv, oneDNN's int8 GEMM), then ours and the
# PyTorch peer (../shared/peer) side by side in one run, f32 and bf16 (bench/side_by_side.sh:
# BENCH_CASES=t5,tr2b,tr5b,vae, PRECISIONS="f32 bf16"); over 10 minutes in all.
# make bench PART=...: only some parts, a comma list of kernels (bench_kernels), attention
# (bench_attention at the 2b length of 13 frames, f32, bf16 and int8), t5, tr2b, tr5b, vae (side by side);
# wan (= wan13,wan14,wanvae,umt5): Wan 2.1 beside PyTorch and stable-diffusion.cpp
# (bench/side_by_side_wan.sh); wangguf: our Q8_0 / Q4_K_M GGUFs, ours and sd.cpp on the same files;
# hv15, wan22, ltx: HunyuanVideo-1.5 (transformer, Qwen2.5-VL text model, VAE), Wan 2.2 TI2V-5B (+ its VAE),
# LTX-Video 2B (+ its VAE) beside PyTorch and sd.cpp (bench/side_by_side_video.sh).
# Ctrl-C or SIGTERM stop it at once. make bench-all: every bench program.
BENCH_THREADS ?= 2
BENCH_CASES   ?= t5,tr2b,tr5b,vae
BENCH_PARTS   := kernels attention t5 tr2b tr5b vae wan wan13 wan14 wanvae umt5 wangguf hv15 wan22 ltx
comma         := ,
PART          ?= kernels,$(BENCH_CASES)
BENCH_LIST    = $(subst $(comma), ,$(PART))
BENCH_SBS     = $(subst $(eval) ,$(comma),$(strip $(filter t5 tr2b tr5b vae wan wan13 wan14 wanvae umt5 wangguf,$(BENCH_LIST))))
BENCH_NEEDED  = $(if $(filter kernels,$(BENCH_LIST)),$(BUILD)/bench/bench_kernels) \
                $(if $(filter attention,$(BENCH_LIST)),$(BUILD)/bench/bench_attention) \
                $(if $(filter t5,$(BENCH_LIST)),$(BUILD)/bench/bench_stage1) \
                $(if $(filter tr2b tr5b,$(BENCH_LIST)),$(BUILD)/bench/bench_stage2) \
                $(if $(filter vae,$(BENCH_LIST)),$(BUILD)/bench/bench_stage3) \
                $(if $(filter wan wan13 wan14,$(BENCH_LIST)),$(BUILD)/bench/bench_wan_stage2) \
                $(if $(filter wan wanvae,$(BENCH_LIST)),$(BUILD)/bench/bench_wan_vae) \
                $(if $(filter wan umt5,$(BENCH_LIST)),$(BUILD)/bench/bench_stage1 $(BUILD)/bench/bench_kernels) \
                $(if $(filter wangguf,$(BENCH_LIST)),$(BUILD)/bench/bench_quant $(BUILD)/bench/bench_kernels) \
                $(if $(BENCH_VIDEO),$(BUILD)/bench/bench_kernels) \
                $(if $(filter hv15,$(BENCH_LIST)),$(BUILD)/bench/bench_hv15 $(BUILD)/bench/bench_qwen $(BUILD)/bench/bench_vae_dir) \
                $(if $(filter wan22,$(BENCH_LIST)),$(BUILD)/bench/bench_wan_stage2 $(BUILD)/bench/bench_wan_vae) \
                $(if $(filter ltx,$(BENCH_LIST)),$(BUILD)/bench/bench_ltx_stage2 $(BUILD)/bench/bench_vae_dir)
BENCH_VIDEO   = $(subst $(eval) ,$(comma),$(strip $(filter hv15 wan22 ltx,$(BENCH_LIST))))
ifneq ($(filter bench,$(MAKECMDGOALS)),)
  ifneq ($(strip $(filter-out $(BENCH_PARTS),$(BENCH_LIST))),)
    $(error make bench: unknown PART '$(strip $(filter-out $(BENCH_PARTS),$(BENCH_LIST)))': give a comma list of $(BENCH_PARTS))
  endif
  ifeq ($(strip $(BENCH_LIST)),)
    $(error make bench: PART is empty: give a comma list of $(BENCH_PARTS))
  endif
endif
bench: $(BENCH_NEEDED)
	$(if $(filter kernels,$(BENCH_LIST)),$(BUILD)/bench/bench_kernels $(BENCH_THREADS) 3 quick)
	$(if $(filter attention,$(BENCH_LIST)),$(BUILD)/bench/bench_attention 2476 30 f32 3 && \
	  $(BUILD)/bench/bench_attention 2476 30 bf16 3 && $(BUILD)/bench/bench_attention 2476 30 int8 3)
	$(if $(BENCH_SBS),BUILD=$(BUILD) THREADS=$(BENCH_THREADS) sh bench/side_by_side.sh $(BENCH_SBS))
	$(if $(BENCH_VIDEO),BUILD=$(BUILD) THREADS=$(BENCH_THREADS) sh bench/side_by_side_video.sh $(BENCH_VIDEO))
bench-all: $(BENCH_BINS)
	@for b in $(BENCH_BINS); do echo "== $$b"; $$b || exit 1; done
	@echo "== bench/omp_under_load.sh (issue 14: alone vs beside CPU hogs)"; sh bench/omp_under_load.sh $(BUILD)
# only the under-load measurement (docs/performance.md "OpenMP threads under load")
.PHONY: bench-load
bench-load: $(BUILD)/bench/bench_stage2 $(BUILD)/bench/bench_stage3
	sh bench/omp_under_load.sh $(BUILD)

fuzz:
	sh scripts/fuzz.sh

tests-build: $(TEST_BINS) $(EXAMPLE_BINS) $(addprefix $(BUILD)/bin/,$(STAGES))
test:
	@sh scripts/install-deps.sh
	@$(MAKE) --no-print-directory test-run
test-run: tests-build $(PROGRAMS)
	@BUILD=$(BUILD) sh tests/run.sh $(TEST_BINS)

asan:
	$(MAKE) BUILD=build-asan OPT="-O1 -mavx2 -mfma -mf16c" SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" tests-build
	@BUILD=build-asan ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0 \
	  sh tests/run.sh $(patsubst tests/%.c,build-asan/tests/%,$(TEST_SRC))

deps:
	sh scripts/install-deps.sh

help:
	@sed -n '1,/^$$/p' Makefile | sed 's/^# \{0,1\}//'
	@echo "make run variables: PROMPT NEGATIVE_PROMPT MODEL STEPS GUIDANCE SEED FRAMES HEIGHT WIDTH FPS"
	@echo "                    SCHEDULER DYNAMIC_CFG CACHE CACHE_THRESHOLD PREVIEW_EVERY TILING CRF THREADS PRECISION NOISE_DTYPE"
	@echo "                    LORA (\"a.safetensors:0.8 b.safetensors\") LORA_FUSE FLOW_SHIFT"
	@echo "                    LORA_HIGH LORA_LOW TRANSFORMER TRANSFORMER_2 (Wan 2.2 A14B: per expert)"
	@echo "                    OUT STAGE3_EXTRA (see docs/usage.md); IMAGE (image-to-video) VIDEO STRENGTH (video-to-video)"
	@echo "                    PROMPTS_FILE (a batch: one prompt per line, output_video_NNNN.mp4)"

clean:
	rm -rf build build-asan build-fuzz build-nompi bin

# ---- Debugging tools (issue 35, docs/debugging.md) and make install ---------------------------
# bin/cvx-inspect, bin/cvx-compare: tools/cvx_*.c, over tools/*.c (libtools.a) and every library;
# the report PNG is drawn with cairo (scripts/install-deps.sh installs libcairo2-dev).
CAIRO_CFLAGS := $(shell pkg-config --cflags cairo 2>/dev/null)
CAIRO_LIBS   := $(shell pkg-config --libs cairo 2>/dev/null || echo -lcairo)
TOOLS        := cvx-inspect cvx-compare
TOOLS_LIB_SRC := $(filter-out tools/cvx_%.c,$(wildcard tools/*.c))
$(BUILD)/tools/%.c.o: CFLAGS_BASE += $(CAIRO_CFLAGS)
$(BUILD)/libtools.a: $(patsubst %,$(BUILD)/%.o,$(TOOLS_LIB_SRC))
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^
$(BUILD)/bin/cvx-%: $(BUILD)/tools/cvx_%.c.o $(BUILD)/libtools.a $(ALL_LIBS)
	@mkdir -p $(dir $@)
	$(CXX) -o $@ $^ $(CAIRO_LIBS) $(LIBS)
all: $(addprefix bin/,$(TOOLS))
tests-build: $(addprefix $(BUILD)/bin/,$(TOOLS))
# the tests that run the tools link libtools too
$(BUILD)/tests/tools_%: $(BUILD)/tests/tools_%.c.o $(BUILD)/libtools.a $(ALL_LIBS)
	$(CXX) -o $@ $^ -lcmocka $(CAIRO_LIBS) $(LIBS)

# make compare A=dir B=dir [TOL=x] [MIN_PSNR=dB] [REPORT=file.png] [FRAMES=i,j]: cvx-compare on two runs
TOL      ?=
MIN_PSNR ?=
REPORT   ?=
.PHONY: compare install uninstall
compare: bin/cvx-compare
	@test -n "$(A)" -a -n "$(B)" || { echo "make compare: give A=dir B=dir (two run directories or files)"; exit 2; }
	bin/cvx-compare $(call sq,$(A)) $(call sq,$(B)) $(if $(TOL),--tol $(TOL)) $(if $(MIN_PSNR),--min_psnr $(MIN_PSNR)) \
	  $(if $(REPORT),--report $(call sq,$(REPORT))) $(if $(FRAMES),--frames $(FRAMES))

# make install PREFIX=dir [DESTDIR=...]: the programs, the library (libcogvideox.a: every layer
# in one archive), the public headers, a pkg-config file (cogvideox.pc) and the --help texts as
# man-style pages; make uninstall removes exactly those files. Models and data are not installed.
PREFIX      ?= /usr/local
INST        = $(DESTDIR)$(PREFIX)
INST_PROGS  = $(STAGES) $(TOOLS)
# the API header, what it includes, and what examples/text2video.c uses beside it (errors, MP4 writing)
INST_HEADERS = pipeline/cvx.h pipeline/cogvideox.h stage3/video.h common/context.h common/lora.h common/safetensors.h \
               common/dtype.h common/fileio.h common/error.h common/pool.h
$(BUILD)/libcogvideox.a: $(ALL_LIBS)
	rm -f $@ && printf 'create $@\n$(foreach l,$(ALL_LIBS),addlib $(l)\n)save\nend\n' | ar -M
install: $(addprefix $(BUILD)/bin/,$(INST_PROGS)) $(BUILD)/libcogvideox.a
	install -d $(INST)/bin $(INST)/lib/pkgconfig $(INST)/include/cogvideox/pipeline $(INST)/include/cogvideox/stage3 \
	  $(INST)/share/man/man1
	install -m 755 $(addprefix $(BUILD)/bin/,$(INST_PROGS)) $(INST)/bin/
	install -m 644 $(BUILD)/libcogvideox.a $(INST)/lib/
	printf '%s\n' 'prefix=$(PREFIX)' 'libdir=$${prefix}/lib' 'includedir=$${prefix}/include/cogvideox' '' \
	  'Name: cogvideox' 'Description: CogVideoX / Wan video diffusion on the CPU (cogvideox.c)' 'Version: 0.1' \
	  'Cflags: -I$${includedir} -fopenmp' 'Libs: -L$${libdir} -lcogvideox -lstdc++ $(LIBS)' \
	  > $(INST)/lib/pkgconfig/cogvideox.pc
	install -m 644 pipeline/cvx.h pipeline/cogvideox.h $(INST)/include/cogvideox/pipeline/
	install -m 644 stage3/video.h $(INST)/include/cogvideox/stage3/
	install -m 644 $(filter common/%,$(INST_HEADERS)) $(INST)/include/cogvideox/
	for p in $(INST_PROGS); do { printf '.TH %s 1\n.nf\n' "$$p"; $(BUILD)/bin/$$p --help | sed 's/\\/\\e/g; s/^[.'"'"']/\\\&&/'; } \
	  > $(INST)/share/man/man1/$$p.1 || exit 1; done
uninstall:
	rm -f $(addprefix $(INST)/bin/,$(INST_PROGS)) $(INST)/lib/libcogvideox.a $(INST)/lib/pkgconfig/cogvideox.pc
	rm -f $(addprefix $(INST)/share/man/man1/,$(addsuffix .1,$(INST_PROGS)))
	rm -f $(addprefix $(INST)/include/cogvideox/,$(filter-out common/%,$(INST_HEADERS)) $(notdir $(filter common/%,$(INST_HEADERS))))
	-rmdir $(INST)/include/cogvideox/pipeline $(INST)/include/cogvideox/stage3 $(INST)/include/cogvideox 2>/dev/null
# ---- end of debugging tools and install ------------------------------------------------------

# ---- The pipeline: make run PROMPT="..." --------------------------------------------------
# Each stage's output depends on its inputs, its program and a stamp file holding its settings
# (rewritten only when they change), so changing only a stage-3 setting re-runs only stage 3.
OUT             ?= stage_outputs
MODEL           ?= models/cogvideox-tiny-random
PROMPT          ?= A panda, dressed in a small red jacket, plays a guitar in a serene bamboo forest.
NEGATIVE_PROMPT ?=
STEPS           ?= 50
GUIDANCE        ?=
SEED            ?= 42
FRAMES          ?=
HEIGHT          ?=
WIDTH           ?=
FPS             ?=
SCHEDULER       ?=
DYNAMIC_CFG     ?=
CACHE           ?=
CACHE_THRESHOLD ?=
PREVIEW_EVERY   ?=
TILING          ?= auto
CRF             ?= 18
THREADS         ?= 0
PRECISION       ?= $(or $(CVX_PRECISION),auto)
NOISE_DTYPE     ?=
STAGE3_EXTRA    ?=
BIN             ?= bin
# image-to-video (IMAGE=file, an I2V MODEL) / video-to-video (VIDEO=file or folder, STRENGTH)
IMAGE           ?=
VIDEO           ?=
STRENGTH        ?=
# LoRA adapters on the transformer: LORA="a.safetensors:0.8 b.safetensors" (FILE[:WEIGHT], space-separated),
# LORA_FUSE=1 merges them into the weights (docs/usage.md "LoRA"); FLOW_SHIFT overrides the flow schedulers'
# shift (Wan; the distilled LoRAs' recipes in docs/models.md)
LORA            ?=
LORA_FUSE       ?=
# Wan 2.2 A14B: LoRAs on one expert (LORA_HIGH / LORA_LOW, same syntax: the lightx2v distill pairs), and
# the experts as single files (TRANSFORMER high noise, TRANSFORMER_2 low noise: ComfyUI's or city96's pairs)
LORA_HIGH       ?=
LORA_LOW        ?=
TRANSFORMER     ?=
TRANSFORMER_2   ?=
FLOW_SHIFT      ?=
lora_file = $(patsubst %:$(lastword $(subst :, ,$(1))),%,$(1))
sq = '$(subst ','\'',$(1))'

# a batch: one prompt per line of PROMPTS_FILE (stage 1 once; stages 2 and 3 per prompt, files
# numbered by the prompt's line: output_video_0003.mp4)
PROMPTS_FILE    ?=
# The model's own make defaults: the embedded tiny models hold a cvx_run_defaults file (VAR=VALUE
# lines: STEPS, FRAMES, HEIGHT, WIDTH), however MODEL is spelled (models/x/, ./models/x); a
# variable given on the command line wins. A real checkpoint has none: its configs decide.
RUN_DEFAULTS    := $(wildcard $(MODEL)/cvx_run_defaults)
$(foreach kv,$(if $(RUN_DEFAULTS),$(shell grep -E '^(STEPS|FRAMES|HEIGHT|WIDTH)=[0-9]+$$' $(call sq,$(RUN_DEFAULTS)))),\
  $(if $(filter command line,$(origin $(firstword $(subst =, ,$(kv))))),,$(eval $(kv))))
model_flag = $(if $(wildcard $(MODEL)/model_index.json),--model_dir $(call sq,$(MODEL)),--model_id $(call sq,$(MODEL)))
STAGE1_ARGS = --precision $(PRECISION) $(if $(PROMPTS_FILE),--prompts_file $(call sq,$(PROMPTS_FILE)),--prompt $(call sq,$(PROMPT))) --negative_prompt $(call sq,$(NEGATIVE_PROMPT)) $(model_flag) \
  $(if $(IMAGE),--image $(call sq,$(IMAGE))) $(if $(VIDEO),--video $(call sq,$(VIDEO)) $(if $(FRAMES),--frames $(FRAMES))) \
  $(if $(IMAGE)$(VIDEO),$(if $(HEIGHT),--height $(HEIGHT)) $(if $(WIDTH),--width $(WIDTH)))
# with IMAGE/VIDEO the size (and VIDEO's frame count) is stage 1's: stage 2 takes it from there
STAGE2_ARGS = --precision $(PRECISION) $(if $(NOISE_DTYPE),--noise_dtype $(NOISE_DTYPE)) --num_inference_steps $(STEPS) $(if $(GUIDANCE),--guidance_scale $(GUIDANCE)) --seed $(SEED) $(model_flag) \
  $(if $(VIDEO),,$(if $(FRAMES),--frames $(FRAMES))) \
  $(if $(IMAGE)$(VIDEO),,$(if $(HEIGHT),--height $(HEIGHT)) $(if $(WIDTH),--width $(WIDTH))) \
  $(if $(STRENGTH),--strength $(STRENGTH)) \
  $(if $(FPS),--fps $(FPS)) $(if $(SCHEDULER),--scheduler $(SCHEDULER)) $(if $(DYNAMIC_CFG),--use_dynamic_cfg) \
  $(if $(CACHE),--cache $(CACHE)) $(if $(CACHE_THRESHOLD),--cache_threshold $(CACHE_THRESHOLD)) \
  $(if $(PREVIEW_EVERY),--preview_every $(PREVIEW_EVERY)) \
  $(foreach l,$(LORA),--lora $(call sq,$(l))) $(if $(LORA_FUSE),--lora_fuse) $(if $(FLOW_SHIFT),--flow_shift $(FLOW_SHIFT)) \
  $(foreach l,$(LORA_HIGH),--lora_high $(call sq,$(l))) $(foreach l,$(LORA_LOW),--lora_low $(call sq,$(l))) \
  $(if $(TRANSFORMER),--transformer $(call sq,$(TRANSFORMER))) $(if $(TRANSFORMER_2),--transformer_2 $(call sq,$(TRANSFORMER_2)))
STAGE3_ARGS = --precision $(PRECISION) $(model_flag) --tiling $(TILING) --crf $(CRF) $(if $(FPS),--fps $(FPS)) \
  $(if $(PROMPTS_FILE),,--contact_sheet $(OUT)/contact_sheet.png) $(STAGE3_EXTRA)

$(OUT)/.stage%.args: FORCE
	@mkdir -p $(OUT)
	@printf '%s\n' $(call sq,$(STAGE$*_ARGS)) > $@.new
	@if cmp -s $@.new $@; then rm -f $@.new; else mv -f $@.new $@; fi
FORCE:

# the conditioning input itself too (a file, or a folder of frames), so editing it re-runs stage 1
$(OUT)/stage1_embeddings.safetensors: $(OUT)/.stage1.args $(BIN)/stage1 $(wildcard $(IMAGE)) $(if $(VIDEO),$(wildcard $(VIDEO) $(VIDEO)/*))
	$(BIN)/stage1 $(STAGE1_ARGS) --output_dir $(OUT) --threads $(THREADS)
$(OUT)/stage2_latents.safetensors: $(OUT)/stage1_embeddings.safetensors $(OUT)/.stage2.args $(BIN)/stage2 \
                                   $(foreach l,$(LORA) $(LORA_HIGH) $(LORA_LOW),$(wildcard $(call lora_file,$(l))))
	$(MPI_ROOT_NOTE)
	$(MPI_RUN) $(BIN)/stage2 $(STAGE2_ARGS) $(STAGE2_MPI) --input_dir $(OUT) --output_dir $(OUT) --threads $(THREADS)
$(OUT)/output_video.mp4: $(OUT)/stage2_latents.safetensors $(OUT)/.stage3.args $(BIN)/stage3
	$(MPI_ROOT_NOTE)
	$(MPI_RUN) $(BIN)/stage3 $(STAGE3_ARGS) --input_dir $(OUT) --output_video $@ --threads $(THREADS)

ifeq ($(PROMPTS_FILE),)
pipeline: $(OUT)/output_video.mp4
	@echo "video: $(OUT)/output_video.mp4  contact sheet: $(OUT)/contact_sheet.png"
else
# the batch always runs (no per-prompt dependencies); the prompt numbers are the non-blank lines'
pipeline: $(BIN)/stage1 $(BIN)/stage2 $(BIN)/stage3
	$(BIN)/stage1 $(STAGE1_ARGS) --output_dir $(OUT) --threads $(THREADS)
	@set -e; for n in $$(sed -n '/[^[:space:]]/=' $(call sq,$(PROMPTS_FILE))); do \
	  echo "== prompt on line $$n of $(PROMPTS_FILE)"; \
	  $(MPI_RUN) $(BIN)/stage2 $(STAGE2_ARGS) $(STAGE2_MPI) --prompt_index $$n --input_dir $(OUT) --output_dir $(OUT) --threads $(THREADS); \
	  $(MPI_RUN) $(BIN)/stage3 $(STAGE3_ARGS) --prompt_index $$n --contact_sheet $(OUT)/contact_sheet_$$(printf %04d $$n).png \
	    --input_dir $(OUT) --threads $(THREADS); \
	done
	@echo "videos: $(OUT)/output_video_NNNN.mp4 (NNNN: the prompt's line in $(PROMPTS_FILE))"
endif
	@if [ -n "$(RUN_DEFAULTS)" ]; then \
	  echo "note: this is the embedded tiny random-weight model: the video is noise and shows only that the"; \
	  echo "      pipeline works. Use MODEL=/path/to/CogVideoX-2b or MODEL=Wan-AI/Wan2.1-T2V-1.3B-Diffusers (a local"; \
	  echo "      directory or a hub id in your HF cache) for real videos."; fi
run:
	@sh scripts/install-deps.sh
	@$(MAKE) --no-print-directory all
	@$(MAKE) --no-print-directory pipeline
# One stage alone, on what is in $(OUT) (always runs).
stage1: all
	bin/stage1 $(STAGE1_ARGS) --output_dir $(OUT) --threads $(THREADS)
stage2: all
	bin/stage2 $(STAGE2_ARGS) --input_dir $(OUT) --output_dir $(OUT) --threads $(THREADS)
stage3 redecode: all
	bin/stage3 $(STAGE3_ARGS) --input_dir $(OUT) --output_video $(OUT)/output_video.mp4 --threads $(THREADS)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
