# The CUDA provider module (libckpt-cuda.so.0), its GPU test and benchmark. Included by the
# top-level Makefile before its `all:` rule, so the first rule here is `all:` (the default goal).
#
# Built only when the CUDA toolkit is found: $(CUDA_HOME)/include/cuda_runtime_api.h
# (CUDA_HOME defaults to /usr/local/cuda). `make CUDA=0` disables it. The module is compiled with
# the C compiler (runtime API only, no nvcc); libckpt.so loads it with dlopen from beside itself
# (lib/gpu/gpu.c), and it loads libcudart with dlopen in turn (12 or 13, preferring one already in the
# process): nothing links libcudart at build time, so no build machine's rpath leaks in.
CUDA      ?= 1
CUDA_HOME ?= /usr/local/cuda
CUDA_FOUND :=
ifneq ($(CUDA),0)
ifneq ($(wildcard $(CUDA_HOME)/include/cuda_runtime_api.h),)
CUDA_FOUND := 1
endif
endif

MODULES ?=
CUDA_MODULE_SONAME := libckpt-cuda.so.0
CUDA_MODULE := $(B)/lib/$(CUDA_MODULE_SONAME)

ifeq ($(CUDA_FOUND),1)
CUDA_LIBDIR ?= $(firstword $(wildcard $(CUDA_HOME)/lib64/libcudart.so $(CUDA_HOME)/lib/libcudart.so \
                 $(CUDA_HOME)/targets/x86_64-linux/lib/libcudart.so))
CUDA_LIBDIR := $(if $(CUDA_LIBDIR),$(patsubst %/,%,$(dir $(CUDA_LIBDIR))),$(CUDA_HOME)/lib64)
CUDA_CFLAGS := -isystem $(CUDA_HOME)/include
MODULES += $(CUDA_MODULE) $(B)/lib/libckpt-cuda.so
CUDA_TEST_HELPERS := $(sort $(wildcard tests/unit/helpers/*.c))
TEST_EXTRA += $(B)/tests/bin/t-gpu $(B)/tests/bin/t-gpu-order $(B)/bench/gpu_bench
endif

all: $(MODULES)

-include tests/cudadouble/cudadouble.mk

# gpu-probe (for tests/gpu/t-no-cudart.sh) links libckpt.so only; built with or without CUDA.
TEST_EXTRA += $(B)/tests/gpu-probe
$(B)/tests/gpu-probe: tests/gpu/gpu-probe.c include/ckpt.h $(B)/lib/libckpt.so
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $< -o $@ $(ALL_LDFLAGS) -L$(B)/lib -lckpt -Wl,-rpath,'$$ORIGIN/../lib'

ifeq ($(CUDA_FOUND),1)
$(B)/obj/cuda/cuda_provider.o: lib/gpu/cuda/cuda_provider.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(DEPFLAGS) -fPIC -fvisibility=hidden -Ilib $(CUDA_CFLAGS) -c $< -o $@

# -z nodelete: libcudart (and the driver it loads) must never be unloaded from a live process,
# even when lib/gpu/gpu.c dlcloses a module that found no device.
$(CUDA_MODULE): $(B)/obj/cuda/cuda_provider.o
	@mkdir -p $(dir $@)
	$(CC) -shared -Wl,-soname,$(CUDA_MODULE_SONAME) -Wl,-z,defs -Wl,-z,nodelete $(ALL_LDFLAGS) \
	  -o $@ $< -ldl
$(B)/lib/libckpt-cuda.so: $(CUDA_MODULE)
	ln -sf $(CUDA_MODULE_SONAME) $@

# The GPU test uses the CUDA runtime directly (through tests/gpu/cudart.h, which loads it like the
# provider does), so it is built here rather than by tests/tests.mk.
$(B)/tests/bin/t-gpu $(B)/tests/bin/t-gpu-order: $(B)/tests/bin/%: tests/gpu/%.c tests/gpu/cudart.h $(CUDA_TEST_HELPERS) tests/unit/helpers.h \
		      include/ckpt.h $(TLIB) $(CUDA_MODULE)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Ilib -Itests/unit -Itests/gpu $(CUDA_CFLAGS) $< $(CUDA_TEST_HELPERS) \
	  -o $@ $(ALL_LDFLAGS) $(TLIB) $(LDLIBS)

# The GPU benchmark links the shared library, which finds the module beside itself.
$(B)/bench/gpu_bench: bench/gpu/gpu_bench.c tests/gpu/cudart.h include/ckpt.h $(B)/lib/libckpt.so $(CUDA_MODULE)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Itests/gpu $(CUDA_CFLAGS) $< -o $@ $(ALL_LDFLAGS) -L$(B)/lib -lckpt \
	  $(RPATH) -ldl

.PHONY: install-cuda-module uninstall-cuda-module
install: install-cuda-module
uninstall: uninstall-cuda-module
install-cuda-module: $(CUDA_MODULE)
	install -d $(DESTDIR)$(LIBDIR)
	install -m 755 $(CUDA_MODULE) $(DESTDIR)$(LIBDIR)/
	ln -sf $(CUDA_MODULE_SONAME) $(DESTDIR)$(LIBDIR)/libckpt-cuda.so
uninstall-cuda-module:
	rm -f $(DESTDIR)$(LIBDIR)/$(CUDA_MODULE_SONAME) $(DESTDIR)$(LIBDIR)/libckpt-cuda.so
endif

# Everything the GPU checks need (tests/gpu/run-on-device.sh), without the rest of the tree (whose
# CLIs need more packages): the library, the module, the GPU tests and the benchmark.
.PHONY: gpu-tests
gpu-tests: lib $(MODULES) $(B)/tests/bin/t-gpu-loader $(B)/tests/gpu-probe \
	   $(if $(CUDA_FOUND),$(B)/tests/bin/t-gpu $(B)/tests/bin/t-gpu-order $(B)/bench/gpu_bench)

# `make gpu-bundle`: build/gpu-bundle, a folder to copy to a bare GPU server (CUDA driver and
# torch, no package manager, no network, no -dev packages) and run there as
# `gpu-bundle/run.sh OUTDIR` (tests/gpu/bundle-run.sh: t-gpu, t-gpu-order, gpu_bench, the
# pipeline sweep, the Python CUDA comparison, 8 minutes in all). It holds the binaries (never the
# CUDA test double: the real runtime is used there), libckpt and its module, and the shared
# libraries they need beyond the C library (liburing, zstd, xxhash: Debian's), found with ldd.
# Must stay under 64 MiB (checked).
GPU_BUNDLE := $(B)/gpu-bundle
GPU_BUNDLE_BINS := $(B)/tests/bin/t-gpu $(B)/tests/bin/t-gpu-order $(B)/bench/gpu_bench \
		   $(B)/bench/ckpt-bench $(B)/bench/pipe-sweep
.PHONY: gpu-bundle
ifeq ($(CUDA_FOUND),1)
gpu-bundle: lib $(MODULES) $(GPU_BUNDLE_BINS)
	rm -rf $(GPU_BUNDLE)
	mkdir -p $(GPU_BUNDLE)/bin $(GPU_BUNDLE)/lib $(GPU_BUNDLE)/python $(GPU_BUNDLE)/bench/python
	cp $(GPU_BUNDLE_BINS) $(GPU_BUNDLE)/bin/
	cp -P $(B)/lib/libckpt.so* $(CUDA_MODULE) $(GPU_BUNDLE)/lib/
	for f in $(GPU_BUNDLE_BINS) $(B)/lib/libckpt.so.0; do \
	  env -u LD_LIBRARY_PATH ldd $$f | awk '$$2 == "=>" && $$3 ~ /^\// {print $$3}'; \
	done | sort -u | grep -Ev '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*|libgcc_s)\.so' | \
	  while read -r l; do cp -L "$$l" $(GPU_BUNDLE)/lib/; done
	cp -r python/libckpt $(GPU_BUNDLE)/python/
	find $(GPU_BUNDLE)/python -name __pycache__ -prune -exec rm -rf {} +
	cp bench/python/torch_vs_ckpt.py bench/python/dcp_bench.py bench/python/peers_bench.py \
	  $(GPU_BUNDLE)/bench/python/
	install -m 755 tests/gpu/bundle-run.sh $(GPU_BUNDLE)/run.sh
	install -m 755 bench/gpu/peers-run.sh $(GPU_BUNDLE)/peers.sh
	install -m 644 tests/gpu/cudart-dirs.sh $(GPU_BUNDLE)/cudart-dirs.sh
	{ echo "libckpt $(VERSION), built $$(date -u +%FT%TZ) on $$(uname -n)"; \
	  echo "git: $$(git describe --always --dirty 2>/dev/null || echo unknown)"; \
	  echo "CUDA headers: $(CUDA_HOME) ($$(sed -n 's/#define CUDART_VERSION *//p' \
	    $(CUDA_HOME)/include/cuda_runtime_api.h))"; \
	  echo "glibc: $$(ldd --version | head -n 1)"; \
	  echo "needs glibc: $$(cat $(GPU_BUNDLE)/bin/* $(GPU_BUNDLE)/lib/*.so* | \
	    grep -ao 'GLIBC_2\.[0-9]*' | sort -uV | tail -n 1 | sed 's/GLIBC_//')"; \
	} > $(GPU_BUNDLE)/BUILD-INFO
	@size=$$(du -sk $(GPU_BUNDLE) | cut -f1); echo "$(GPU_BUNDLE): $$size KiB"; \
	  [ $$size -lt 65536 ] || { echo "gpu-bundle: over 64 MiB"; exit 1; }
	@if ls $(GPU_BUNDLE)/lib | grep -q '^libcuda'; then echo "gpu-bundle: CUDA libraries inside"; exit 1; fi
else
gpu-bundle:
	@echo "gpu-bundle: the CUDA headers are needed ($(CUDA_HOME)/include/cuda_runtime_api.h)"; exit 1
endif
