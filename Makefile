# cddp build: libcddp (static + shared), the `cddp` binary, tests. `make help` lists targets.
# Knobs: BUILD=dir  WERROR=1  SANITIZER=address,undefined|thread  NO_MPI=1  NO_CUDA=1  OPT=-O2
CC       ?= gcc
BUILD    ?= build
OPT      ?= -O2
WERROR   ?= 0
CFLAGS_BASE := -std=gnu11 -g $(OPT) -pthread -fPIC -Wall -Wextra -Wno-unused-parameter \
               -Wshadow -Wstrict-prototypes -Wformat=2 -fno-strict-aliasing \
               -Iinclude -Isrc -Itests -D_GNU_SOURCE
ifeq ($(WERROR),1)
CFLAGS_BASE += -Werror
endif
ifneq ($(SANITIZER),)
CFLAGS_BASE += -fsanitize=$(SANITIZER) -fno-omit-frame-pointer
LDFLAGS     += -fsanitize=$(SANITIZER)
endif
LDLIBS   := -lopenblas -lyaml -lz -pthread -lcrypto -lm -lrt

# ---- optional dependencies: detected and reported, never required
HAVE_MPI := 0
ifneq ($(NO_MPI),1)
ifneq ($(shell command -v mpicc 2>/dev/null),)
HAVE_MPI := 1
MPI_CFLAGS := $(shell mpicc --showme:compile 2>/dev/null)
MPI_LIBS   := $(shell mpicc --showme:link 2>/dev/null)
endif
endif
CUDA_HOME ?= /usr/local/cuda
HAVE_NCCL := 0
ifneq ($(NO_CUDA),1)
ifneq ($(wildcard $(CUDA_HOME)/include/nccl.h)$(wildcard /usr/include/nccl.h),)
HAVE_NCCL := 1
endif
endif
CFLAGS_BASE += -DCDDP_HAVE_MPI=$(HAVE_MPI) -DCDDP_HAVE_NCCL=$(HAVE_NCCL)
ifeq ($(HAVE_MPI),1)
LDLIBS += $(MPI_LIBS)
endif
CFLAGS ?=
ALL_CFLAGS := $(CFLAGS_BASE) $(CFLAGS)

LIB_SRCS  := $(sort $(wildcard src/common/*.c src/store/*.c src/run/*.c src/comm/*.c src/train/*.c))
CLI_SRCS  := $(sort $(wildcard src/cli/*.c))
TEST_SRCS := $(sort $(wildcard tests/unit/test_*.c))
FUZZ_SRCS := $(sort $(wildcard tests/fuzz/fuzz_*.c))
HELPER_SRCS := $(sort $(wildcard tests/helpers/*.c))
EXAMPLE_SRCS := $(sort $(wildcard examples/*.c))
LIB_OBJS  := $(LIB_SRCS:%.c=$(BUILD)/obj/%.o)
CLI_OBJS  := $(CLI_SRCS:%.c=$(BUILD)/obj/%.o)
TEST_BINS := $(TEST_SRCS:tests/unit/%.c=$(BUILD)/tests/%)
TEST_MAIN := $(BUILD)/obj/tests/test_main.o
HELPER_BINS := $(HELPER_SRCS:tests/helpers/%.c=$(BUILD)/tests/helpers/%)
EXAMPLE_BINS := $(EXAMPLE_SRCS:examples/%.c=$(BUILD)/examples/%)

.PHONY: all lib cli tests examples report clean help asan tsan fuzz check-asan check-tsan bench
.SECONDARY:
all: report lib cli tests examples

report:
	@if [ "$(HAVE_MPI)" = 1 ]; then echo "✓ MPI found ($(shell command -v mpicc))"; else echo "✗ MPI not found (apt-get install libopenmpi-dev openmpi-bin; or NO_MPI=1)"; fi
	@if [ "$(HAVE_NCCL)" = 1 ]; then echo "✓ CUDA/NCCL found ($(CUDA_HOME))"; else echo "✗ CUDA/NCCL not found"; fi

lib: $(BUILD)/libcddp.a $(BUILD)/libcddp.so
cli: $(BUILD)/cddp
tests: $(TEST_BINS) $(HELPER_BINS)
examples: $(EXAMPLE_BINS)

# Quiet by default; V=1 shows the commands.
Q := $(if $(V),,@)
$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@$(if $(V),,echo "  CC    $<")
	$(Q)$(CC) $(ALL_CFLAGS) -MMD -MP -c $< -o $@

# Only the mpi backend sees MPI's headers; every binary links MPI_LIBS when it is built.
$(BUILD)/obj/src/comm/mpi.o: ALL_CFLAGS += $(MPI_CFLAGS)

$(BUILD)/libcddp.a: $(LIB_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/libcddp.so: $(LIB_OBJS)
	$(CC) -shared $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/cddp: $(CLI_OBJS) $(BUILD)/libcddp.a
	$(CC) $(LDFLAGS) -o $@ $(CLI_OBJS) $(BUILD)/libcddp.a $(LDLIBS)

$(BUILD)/tests/%: $(BUILD)/obj/tests/unit/%.o $(TEST_MAIN) $(BUILD)/libcddp.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< $(TEST_MAIN) $(BUILD)/libcddp.a $(LDLIBS)

# Programs the shell tests start as workers (tests/helpers/*.c, each with its own main).
$(BUILD)/tests/helpers/%: $(BUILD)/obj/tests/helpers/%.o $(BUILD)/libcddp.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< $(BUILD)/libcddp.a $(LDLIBS)

# Example programs that use libcddp as a user would: public headers only.
$(BUILD)/examples/%: $(BUILD)/obj/examples/%.o $(BUILD)/libcddp.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< $(BUILD)/libcddp.a $(LDLIBS)

# Sanitizer builds of the library and every unit test (store and comm among them).
asan:
	$(MAKE) BUILD=build-asan SANITIZER=address,undefined OPT=-O1 lib cli tests
tsan:
	$(MAKE) BUILD=build-tsan SANITIZER=thread OPT=-O1 lib cli tests

# Build and run the store and comm tests under the sanitizers (tests/run.sh does this too).
check-asan: asan
	@fail=0; for t in build-asan/tests/test_store* build-asan/tests/test_comm*; do ASAN_OPTIONS=detect_leaks=1 CDDP_TEST_TIMEOUT_SCALE=4 $$t || fail=1; done; exit $$fail
check-tsan: tsan
	@fail=0; for t in build-tsan/tests/test_store* build-tsan/tests/test_comm*; do TSAN_OPTIONS=halt_on_error=1 CDDP_TEST_TIMEOUT_SCALE=4 $$t || fail=1; done; exit $$fail

# every bench program (bench/Makefile) into build/bench/; the MPI peer when mpicc is there
bench: lib
	@$(MAKE) --no-print-directory -C bench BUILD=$(abspath $(BUILD)) model gpt reduce ceiling store $(if $(filter 1,$(HAVE_MPI)),all)

# libFuzzer targets (clang): build/fuzz/fuzz_*
fuzz:
	@mkdir -p $(BUILD)/fuzz
	for f in $(FUZZ_SRCS); do \
	  clang -std=gnu11 -g -O1 -fsanitize=fuzzer,address,undefined -Iinclude -Isrc -D_GNU_SOURCE \
	    -DCDDP_HAVE_MPI=0 -DCDDP_HAVE_NCCL=0 $$f $(LIB_SRCS) -o $(BUILD)/fuzz/$$(basename $$f .c) $(LDLIBS) || exit 1; \
	done

clean:
	rm -rf build build-asan build-tsan

help:
	@echo "make [all|lib|cli|tests|bench|asan|tsan|check-asan|check-tsan|fuzz|clean] [BUILD=dir] [WERROR=1] [SANITIZER=...] [V=1]"

-include $(LIB_OBJS:.o=.d) $(CLI_OBJS:.o=.d) $(TEST_BINS:$(BUILD)/tests/%=$(BUILD)/obj/tests/unit/%.d) \
         $(EXAMPLE_BINS:$(BUILD)/examples/%=$(BUILD)/obj/examples/%.d) $(HELPER_BINS:$(BUILD)/tests/helpers/%=$(BUILD)/obj/tests/helpers/%.d)
