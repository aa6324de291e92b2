# cddp build: libcddp (static + shared: store, comm, world, ddp), the applications (src/app:
# launcher, trainer, doctor, bench, cli) linked into the `cddp` binary, tests. `make help` lists
# targets. Knobs: BUILD=dir  WERROR=1  SANITIZER=address,undefined|thread  NO_MPI=1  NO_CUDA=1
# OPT=-O2  PREFIX=/usr/local  DESTDIR=  CUDA_HOME=/usr/local/cuda  CUDA_ARCH=-gencode...  NVCC=
CC       ?= gcc
BUILD    ?= build
OPT      ?= -O2
WERROR   ?= 0
CFLAGS_BASE := -std=gnu11 -g $(OPT) -pthread -fPIC -Wall -Wextra -Wno-unused-parameter \
               -Wshadow -Wstrict-prototypes -Wformat=2 -fno-strict-aliasing \
               -Iinclude -Isrc -Isrc/app -Itests -D_GNU_SOURCE
ifeq ($(WERROR),1)
CFLAGS_BASE += -Werror
endif
ifneq ($(SANITIZER),)
CFLAGS_BASE += -fsanitize=$(SANITIZER) -fno-omit-frame-pointer
LDFLAGS     += -fsanitize=$(SANITIZER)
endif
VERSION  := 0.2.0
# The one version: the soname, cddp.pc, and what the installed header, `cddp --version` and
# checkpoints say (cddp.h's macros, which a program compiled against the header sees); a bump
# here without cddp.h (0.1.0 was left there once) stops the build instead of shipping both.
empty :=
space := $(empty) $(empty)
HEADER_VERSION := $(shell sed -n 's/^\#define CDDP_VERSION_STRING "\(.*\)"/\1/p' include/cddp/cddp.h)
HEADER_PARTS := $(shell sed -n 's/^\#define CDDP_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)/\2/p' include/cddp/cddp.h)
ifneq ($(HEADER_VERSION) $(subst $(space),.,$(strip $(HEADER_PARTS))),$(VERSION) $(VERSION))
$(error include/cddp/cddp.h says version $(HEADER_VERSION) ($(HEADER_PARTS)), the Makefile's VERSION is $(VERSION): set both)
endif
SOMAJOR  := 0
PREFIX   ?= /usr/local
# what the library needs, and what the applications add (BLAS for the models, YAML for configs)
LIB_LDLIBS := -lz -pthread -lcrypto -lm -lrt

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
# CUDA: when nvcc is found (and NO_CUDA is not set) the trainer's device layer
# (src/app/trainer/cuda/*.cu) is built for CUDA_ARCH and linked with the static CUDA runtime,
# so every binary still starts where there is no driver; cuBLAS, NCCL and NVML are dlopened.
# Sanitizer builds leave it out (nvcc's objects are not instrumented).
HAVE_CUDA := 0
HAVE_NCCL := 0
CUDA_ARCH ?= -gencode arch=compute_90,code=sm_90
ifneq ($(NO_CUDA),1)
ifeq ($(SANITIZER),)
NVCC ?= $(firstword $(wildcard $(CUDA_HOME)/bin/nvcc) $(shell command -v nvcc 2>/dev/null))
ifneq ($(NVCC),)
ifneq ($(wildcard $(CUDA_HOME)/lib64/libcudart_static.a),)
HAVE_CUDA := 1
endif
endif
ifeq ($(HAVE_CUDA),1)
ifneq ($(wildcard $(CUDA_HOME)/include/nccl.h),)
HAVE_NCCL := 1
endif
endif
endif
endif
CFLAGS_BASE += -DCDDP_HAVE_MPI=$(HAVE_MPI) -DCDDP_HAVE_CUDA=$(HAVE_CUDA) -DCDDP_HAVE_NCCL=$(HAVE_NCCL) \
               -DCDDP_CUDA_LIBDIR='"$(CUDA_HOME)/lib64"'
NVCCFLAGS := -std=c++17 -g -O2 $(CUDA_ARCH) -Iinclude -Isrc -Isrc/app -D_GNU_SOURCE -DCDDP_HAVE_CUDA=1 \
             -DCDDP_HAVE_NCCL=$(HAVE_NCCL) -DCDDP_CUDA_LIBDIR='"$(CUDA_HOME)/lib64"' \
             -Xcompiler -fPIC,-Wall,-Wextra,-Wno-unused-parameter,-Wshadow
NVCC_WERROR := -Werror all-warnings -Xcompiler -Werror
ifeq ($(WERROR),1)
NVCCFLAGS += $(NVCC_WERROR)
endif
CUDA_LDLIBS :=
ifeq ($(HAVE_CUDA),1)
CUDA_LDLIBS := -L$(CUDA_HOME)/lib64 -lcudart_static -lstdc++ -ldl
endif
ifeq ($(HAVE_MPI),1)
LIB_LDLIBS += $(MPI_LIBS)
endif
LDLIBS := -lopenblas -lyaml $(LIB_LDLIBS) $(CUDA_LDLIBS)
CFLAGS ?=
ALL_CFLAGS := $(CFLAGS_BASE) $(CFLAGS)
# Every object depends on a stamp of the flags that shape it. The stamp is rewritten only when
# they change, so a feature that appears after the first build (MPI installed by the test
# command after the README's build command) rebuilds everything instead of keeping the old answer.
# -Werror changes no object, so it is left out: `make cli` (the benches) after `make WERROR=1`
# (the suite) rebuilds nothing.
FLAGS_STAMP := $(BUILD)/flags.stamp
FLAGS_NOW := $(CC) $(filter-out -Werror,$(ALL_CFLAGS)) | $(MPI_CFLAGS) | $(NVCC) \
             $(filter-out $(NVCC_WERROR),$(NVCCFLAGS)) | $(LDFLAGS) $(LDLIBS)
ifneq ($(FLAGS_NOW),$(file <$(FLAGS_STAMP)))
ifeq ($(findstring n,$(firstword -$(MAKEFLAGS))),) # not under make -n, which must change nothing
$(shell mkdir -p $(BUILD))
$(file >$(FLAGS_STAMP),$(FLAGS_NOW))
endif
endif

LIB_SRCS  := $(sort $(wildcard src/common/*.c src/store/*.c src/comm/*.c src/job/*.c src/world/*.c src/ddp/*.c))
APP_MAIN  := src/app/cli/main.c
APP_SRCS  := $(filter-out $(APP_MAIN),$(sort $(wildcard src/app/*/*.c)))
CU_SRCS   := $(if $(filter 1,$(HAVE_CUDA)),$(sort $(wildcard src/app/trainer/cuda/*.cu)))
GPU_TEST_SRCS := $(sort $(wildcard tests/gpu/*.c))
TEST_SRCS := $(sort $(wildcard tests/unit/test_*.c))
FUZZ_SRCS := $(sort $(wildcard tests/fuzz/fuzz_*.c))
HELPER_SRCS := $(sort $(wildcard tests/helpers/*.c))
EXAMPLE_SRCS := $(sort $(wildcard examples/*.c))
LIB_OBJS  := $(LIB_SRCS:%.c=$(BUILD)/obj/%.o)
APP_OBJS  := $(APP_SRCS:%.c=$(BUILD)/obj/%.o) $(CU_SRCS:%.cu=$(BUILD)/obj/%.o)
SO        := $(BUILD)/libcddp.so.$(VERSION)
# every command; build/cddp is the light binary that runs it for train, bench and sample
CLI_FULL  := $(BUILD)/libexec/cddp/cddp-full
TEST_BINS := $(TEST_SRCS:tests/unit/%.c=$(BUILD)/tests/%)
TEST_MAIN := $(BUILD)/obj/tests/test_main.o
HELPER_BINS := $(HELPER_SRCS:tests/helpers/%.c=$(BUILD)/tests/helpers/%)
EXAMPLE_BINS := $(EXAMPLE_SRCS:examples/%.c=$(BUILD)/examples/%)
# the device tests (tests/gpu/run.sh runs them on a GPU machine): compiled whenever CUDA is
GPU_TEST_BINS := $(if $(filter 1,$(HAVE_CUDA)),$(GPU_TEST_SRCS:tests/gpu/%.c=$(BUILD)/tests/gpu/%))

.PHONY: all lib cli tests gpu-tests examples report clean help asan tsan fuzz check-asan check-tsan bench install uninstall print-ldlibs
.SECONDARY:
all: report lib cli tests gpu-tests examples

report:
	@if [ "$(HAVE_MPI)" = 1 ]; then echo "✓ MPI found ($(shell command -v mpicc))"; else echo "✗ MPI not found (apt-get install libopenmpi-dev openmpi-bin; or NO_MPI=1)"; fi
	@if [ "$(HAVE_CUDA)" = 1 ]; then echo "✓ CUDA found ($(NVCC), $(CUDA_ARCH)): device layer built, cudart static$(if $(filter 1,$(HAVE_NCCL)),; NCCL backend built (libnccl dlopened))"; \
	 elif [ "$(NO_CUDA)" = 1 ] || [ -n "$(SANITIZER)" ]; then echo "✗ CUDA off (NO_CUDA=1 or a sanitizer build)"; \
	 else echo "✗ CUDA not found (no nvcc or libcudart_static.a under CUDA_HOME=$(CUDA_HOME)): CPU only"; fi

lib: $(BUILD)/libcddp.a $(BUILD)/libcddp.so
cli: $(BUILD)/cddp $(CLI_FULL)
tests: $(TEST_BINS) $(HELPER_BINS)
gpu-tests: $(GPU_TEST_BINS)
examples: $(EXAMPLE_BINS)

# Quiet by default; V=1 shows the commands.
Q := $(if $(V),,@)
$(FLAGS_STAMP): ;
$(BUILD)/obj/%.o: %.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	@$(if $(V),,echo "  CC    $<")
	$(Q)$(CC) $(ALL_CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/obj/%.o: %.cu $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	@$(if $(V),,echo "  NVCC  $<")
	$(Q)$(NVCC) $(NVCCFLAGS) -MMD -MP -c $< -o $@

# Only the nccl backend sees NCCL's (and so CUDA's) headers, as system headers: NCCL is dlopened.
$(BUILD)/obj/src/comm/nccl.o: ALL_CFLAGS += $(if $(filter 1,$(HAVE_NCCL)),-isystem $(CUDA_HOME)/include)
# Only the mpi backend sees MPI's headers; every binary links MPI_LIBS when it is built.
$(BUILD)/obj/src/comm/mpi.o: ALL_CFLAGS += $(MPI_CFLAGS)
# The library exports what include/cddp/*.h declares (those headers push default visibility)
# and hides everything else, cddp__ internals included.
$(LIB_OBJS): ALL_CFLAGS += -fvisibility=hidden

$(BUILD)/libcddp.a: $(LIB_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

# libcddp.so.VERSION with soname libcddp.so.SOMAJOR; every symbol it needs is resolved
# (--no-undefined) by what LIB_LDLIBS names: no BLAS, no YAML.
$(SO): $(LIB_OBJS) src/libcddp.map
	$(CC) -shared $(LDFLAGS) -Wl,-soname,libcddp.so.$(SOMAJOR) -Wl,--version-script=src/libcddp.map \
	  -Wl,--no-undefined -o $@ $(LIB_OBJS) $(LIB_LDLIBS)
$(BUILD)/libcddp.so: $(SO)
	ln -sf libcddp.so.$(VERSION) $(BUILD)/libcddp.so.$(SOMAJOR) && ln -sf libcddp.so.$(SOMAJOR) $@

# The applications' objects (everything under src/app but main), for the binary and the tests.
$(BUILD)/libcddp-app.a: $(APP_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

# cddp: the commands without BLAS, MPI or CUDA (the agent starts in ~1.5 ms of CPU, not 9);
# --as-needed drops the libraries none of its objects calls. cddp-full: every command.
$(BUILD)/obj/src/app/cli/main_light.o: $(APP_MAIN) $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	@$(if $(V),,echo "  CC    $< (light)")
	$(Q)$(CC) $(ALL_CFLAGS) -DCDDP_CLI_LIGHT=1 -MMD -MP -c $< -o $@
$(BUILD)/cddp: $(BUILD)/obj/src/app/cli/main_light.o $(BUILD)/libcddp-app.a $(BUILD)/libcddp.a
	$(CC) $(LDFLAGS) -o $@ $^ -Wl,--as-needed $(LDLIBS)
$(CLI_FULL): $(BUILD)/obj/$(APP_MAIN:.c=.o) $(BUILD)/libcddp-app.a $(BUILD)/libcddp.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/tests/%: $(BUILD)/obj/tests/unit/%.o $(TEST_MAIN) $(BUILD)/libcddp-app.a $(BUILD)/libcddp.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# Programs the shell tests start as workers (tests/helpers/*.c, each with its own main).
$(BUILD)/tests/helpers/%: $(BUILD)/obj/tests/helpers/%.o $(BUILD)/libcddp-app.a $(BUILD)/libcddp.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# the device tests call the CUDA runtime's C API themselves (its headers, as system headers)
$(BUILD)/obj/tests/gpu/%.o: ALL_CFLAGS += -isystem $(CUDA_HOME)/include
$(BUILD)/tests/gpu/%: $(BUILD)/obj/tests/gpu/%.o $(BUILD)/libcddp-app.a $(BUILD)/libcddp.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# Example programs that use libcddp as a user would: public headers and the library alone.
$(BUILD)/examples/%: $(BUILD)/obj/examples/%.o $(BUILD)/libcddp.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< $(BUILD)/libcddp.a $(LIB_LDLIBS)

# make install [PREFIX=/usr/local] [DESTDIR=]: the binary, the library (static, and shared with
# its soname), the public headers, cddp.pc for pkg-config; make uninstall removes them.
install: lib cli
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/libexec/cddp $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/include/cddp
	install -m 755 $(BUILD)/cddp $(DESTDIR)$(PREFIX)/bin/cddp
	install -m 755 $(CLI_FULL) $(DESTDIR)$(PREFIX)/libexec/cddp/cddp-full
	install -m 644 $(BUILD)/libcddp.a $(DESTDIR)$(PREFIX)/lib/libcddp.a
	install -m 755 $(SO) $(DESTDIR)$(PREFIX)/lib/libcddp.so.$(VERSION)
	ln -sf libcddp.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/libcddp.so.$(SOMAJOR)
	ln -sf libcddp.so.$(SOMAJOR) $(DESTDIR)$(PREFIX)/lib/libcddp.so
	install -m 644 include/cddp/*.h $(DESTDIR)$(PREFIX)/include/cddp/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' -e 's|@LIBS_PRIVATE@|$(LIB_LDLIBS)|' \
	  src/cddp.pc.in >$(DESTDIR)$(PREFIX)/lib/pkgconfig/cddp.pc
	@if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" = 0 ] && command -v ldconfig >/dev/null; then ldconfig; fi
uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/cddp $(DESTDIR)$(PREFIX)/lib/libcddp.a $(DESTDIR)$(PREFIX)/lib/libcddp.so \
	  $(DESTDIR)$(PREFIX)/lib/libcddp.so.$(SOMAJOR) $(DESTDIR)$(PREFIX)/lib/libcddp.so.$(VERSION) \
	  $(DESTDIR)$(PREFIX)/lib/pkgconfig/cddp.pc
	rm -rf $(DESTDIR)$(PREFIX)/include/cddp $(DESTDIR)$(PREFIX)/libexec/cddp

# Sanitizer builds of the library and every unit test (store and comm among them).
asan:
	$(MAKE) BUILD=build-asan SANITIZER=address,undefined OPT=-O1 lib cli tests
tsan:
	$(MAKE) BUILD=build-tsan SANITIZER=thread OPT=-O1 lib cli tests

# Build and run the store and comm tests under the sanitizers (tests/run.sh does this too).
check-asan: asan
	@fail=0; for t in build-asan/tests/test_store* build-asan/tests/test_comm*; do ASAN_OPTIONS=detect_leaks=1 CDDP_TEST_SCALE=4 $$t || fail=1; done; exit $$fail
check-tsan: tsan
	@fail=0; for t in build-tsan/tests/test_store* build-tsan/tests/test_comm*; do TSAN_OPTIONS=halt_on_error=1 CDDP_TEST_SCALE=4 $$t || fail=1; done; exit $$fail

# every bench program (bench/Makefile) into build/bench/; the MPI peer when mpicc is there
bench: lib $(BUILD)/libcddp-app.a
	@$(MAKE) --no-print-directory -C bench BUILD=$(abspath $(BUILD)) CUDA_LDLIBS="$(CUDA_LDLIBS)" model gpt recompute reduce ceiling store desync peak probe $(if $(filter 1,$(HAVE_MPI)),all)

# libFuzzer targets (clang): build/fuzz/fuzz_*. The sources are instrumented once into one
# archive every fuzzer links (not recompiled per fuzzer), and only what changed is rebuilt.
FUZZ_CFLAGS := -std=gnu11 -g -O1 -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -Iinclude -Isrc -Isrc/app -D_GNU_SOURCE \
  -DCDDP_HAVE_MPI=0 -DCDDP_HAVE_CUDA=0 -DCDDP_HAVE_NCCL=0
FUZZ_OBJS := $(patsubst %.c,$(BUILD)/fuzz/obj/%.o,$(LIB_SRCS) $(APP_SRCS))
FUZZ_LIB  := $(BUILD)/fuzz/libcddp-fuzz.a
FUZZ_BINS := $(FUZZ_SRCS:tests/fuzz/%.c=$(BUILD)/fuzz/%)
fuzz: $(FUZZ_BINS)

$(BUILD)/fuzz/obj/%.o: %.c Makefile
	@mkdir -p $(dir $@)
	$(Q)clang $(FUZZ_CFLAGS) -MMD -MP -c $< -o $@

$(FUZZ_LIB): $(FUZZ_OBJS)
	$(Q)rm -f $@ && ar rcs $@ $^

$(BUILD)/fuzz/%: tests/fuzz/%.c $(FUZZ_LIB)
	$(Q)clang $(FUZZ_CFLAGS) -fsanitize=fuzzer -MMD -MP $< $(FUZZ_LIB) -o $@ $(filter-out $(MPI_LIBS),$(LDLIBS))

# what a program linking libcddp-app.a and libcddp.a (not MPI) needs after them: for tests that link one
print-ldlibs:
	@echo $(filter-out $(MPI_LIBS),$(LDLIBS))

clean:
	rm -rf build build-asan build-tsan

help:
	@echo "make [all|lib|cli|tests|gpu-tests|bench|install|uninstall|asan|tsan|check-asan|check-tsan|fuzz|clean] [BUILD=dir] [WERROR=1] [SANITIZER=...] [PREFIX=...] [V=1]"

-include $(FUZZ_OBJS:.o=.d) $(FUZZ_BINS:=.d) $(LIB_OBJS:.o=.d) $(APP_OBJS:.o=.d) $(BUILD)/obj/$(APP_MAIN:.c=.d) $(BUILD)/obj/src/app/cli/main_light.d $(TEST_BINS:$(BUILD)/tests/%=$(BUILD)/obj/tests/unit/%.d) \
         $(EXAMPLE_BINS:$(BUILD)/examples/%=$(BUILD)/obj/examples/%.d) $(GPU_TEST_BINS:$(BUILD)/tests/gpu/%=$(BUILD)/obj/tests/gpu/%.d) $(HELPER_BINS:$(BUILD)/tests/helpers/%=$(BUILD)/obj/tests/helpers/%.d)
