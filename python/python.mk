# The Python package (python/). `make wheel` writes $(B)/dist/libckpt-VERSION-py3-none-PLATFORM.whl
# through the package's own PEP 517 backend (python/_backend/libckpt_build.py, also what
# `pip install ./python` runs), which builds the library it carries with
# `make B=build/wheel python-lib`: a build tree of its own, never a sanitizer build.
PYTHON ?= python3
.PHONY: wheel python-lib python-lib-files python-bin-files
wheel:
	$(PYTHON) python/_backend/libckpt_build.py wheel $(B)/dist
# What a wheel carries: libckpt.so.0, and the CUDA provider when it is built (lib/gpu/cuda/cuda.mk),
# and the ckptctl program (python-bin-files), run by the package's `ckptctl` entry point.
python-lib: $(B)/lib/$(SONAME) $(MODULES) $(B)/bin/ckptctl
python-lib-files:
	@echo $(B)/lib/$(SONAME) $(filter %.so.0,$(MODULES))
python-bin-files:
	@echo $(B)/bin/ckptctl
