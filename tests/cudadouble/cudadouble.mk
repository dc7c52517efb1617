# The CUDA test double (tests/cudadouble): build/tests/lib/libcuda.so.1 and the runtimes
# libcudart.so.13 and libcudart.so.12 that need it. Built with the tests when the CUDA headers are
# found (it implements their prototypes); never installed, never in the GPU bundle. tests/run.sh
# puts build/tests/lib on LD_LIBRARY_PATH unless CKPT_TEST_REAL_CUDA=1.
ifeq ($(CUDA_FOUND),1)
CUDADOUBLE_DIR := $(B)/tests/lib
CUDADOUBLE := $(CUDADOUBLE_DIR)/libcuda.so.1 $(CUDADOUBLE_DIR)/libcudart.so.13 \
	      $(CUDADOUBLE_DIR)/libcudart.so.12
TEST_EXTRA += $(CUDADOUBLE)
CUDADOUBLE_CFLAGS = $(filter-out -Wmissing-prototypes,$(ALL_CFLAGS)) -fPIC -fvisibility=hidden \
		     $(CUDA_CFLAGS)

$(CUDADOUBLE_DIR)/libcuda.so.1: tests/cudadouble/cudadouble.c tests/cudadouble/cudadouble.h
	@mkdir -p $(dir $@)
	$(CC) $(CUDADOUBLE_CFLAGS) -shared -Wl,-soname,libcuda.so.1 $< -o $@ $(ALL_LDFLAGS) -lpthread

$(CUDADOUBLE_DIR)/libcudart.so.%: tests/cudadouble/cudart_stub.c tests/cudadouble/cudadouble.h \
				  $(CUDADOUBLE_DIR)/libcuda.so.1
	$(CC) $(CUDADOUBLE_CFLAGS) -DCUDADOUBLE_RT=$(if $(filter 12,$*),12020,13000) -shared \
	  -Wl,-soname,libcudart.so.$* $< -o $@ $(ALL_LDFLAGS) $(CUDADOUBLE_DIR)/libcuda.so.1 \
	  -Wl,-rpath,'$$ORIGIN'
endif
