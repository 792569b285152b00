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
OPT     ?= -O2 -march=native
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
LIBS = -fopenmp $(SAN) $(shell pkg-config --libs json-c 2>/dev/null || echo -ljson-c) $(BLAS_LIBS) \
       -lsentencepiece -lavformat -lavcodec -lswscale -lavutil -lm -lpthread

COMMON_SRC := $(wildcard common/*.c) $(wildcard common/*.cc)
COMMON_OBJ := $(patsubst %,$(BUILD)/%.o,$(COMMON_SRC))
LIBCVX     := $(BUILD)/libcvx.a

stage_src = $(filter-out $(1)/main.c,$(wildcard $(1)/*.c) $(wildcard $(1)/*.cc))
stage_obj = $(patsubst %,$(BUILD)/%.o,$(call stage_src,$(1)))
STAGES := stage1 stage2 stage3
PROGRAMS := $(addprefix bin/,$(STAGES))

TEST_SRC  := $(wildcard tests/*.c)
TEST_BINS := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRC))

.PHONY: all test asan deps clean bench fuzz run stage1 stage2 stage3 redecode help
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
$(BUILD)/bin/$(1): $(BUILD)/$(1)/main.c.o $(BUILD)/lib$(1).a $(LIBCVX)
	@mkdir -p $$(dir $$@)
	$(CXX) -o $$@ $$^ $(LIBS)
endef
$(foreach s,$(STAGES),$(eval $(call STAGE_RULES,$(s))))

# bin/ holds the programs of the default build.
bin/%: $(BUILD)/bin/%
	@mkdir -p bin
	cp $< $@

# Tests link the common library plus the stage their name starts with (stage1_*.c ...);
# e2e_*.c link every stage.
test_libs = $(if $(filter stage1_%,$(1)),$(BUILD)/libstage1.a,)$(if $(filter stage2_%,$(1)),$(BUILD)/libstage2.a,)$(if $(filter stage3_%,$(1)),$(BUILD)/libstage3.a,)$(if $(filter e2e_%,$(1)),$(BUILD)/libstage1.a $(BUILD)/libstage2.a $(BUILD)/libstage3.a,)
define TEST_RULE
$(BUILD)/tests/$(1): $(BUILD)/tests/$(1).c.o $(call test_libs,$(1)) $(LIBCVX)
	$(CXX) -o $$@ $$^ -lcmocka $(LIBS)
endef
$(foreach t,$(patsubst tests/%.c,%,$(TEST_SRC)),$(eval $(call TEST_RULE,$(t))))

tests-build: $(TEST_BINS) $(addprefix $(BUILD)/bin/,$(STAGES))
test: tests-build $(PROGRAMS)
	@BUILD=$(BUILD) sh tests/run.sh $(TEST_BINS)

asan:
	$(MAKE) BUILD=build-asan OPT="-O1 -march=native" SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" tests-build
	@BUILD=build-asan ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0 \
	  sh tests/run.sh $(patsubst tests/%.c,build-asan/tests/%,$(TEST_SRC))

deps:
	sh scripts/install-deps.sh

clean:
	rm -rf build build-asan build-fuzz bin

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
