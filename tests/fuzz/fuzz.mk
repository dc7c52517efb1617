# `make fuzz`: builds the libFuzzer targets (tests/fuzz/README.md) with clang, ASan and UBSan into
# $(B)/fuzz and runs each for FUZZ_TIME seconds (default 60; FUZZ_TARGETS and FUZZ_TIME may be
# overridden), new inputs into $(B)/fuzz/work-TARGET, the seeds read only, a crash left as
# $(B)/fuzz/crash-TARGET-*. Not part of `make check` (which replays the corpus: t-fuzz-replay).
# The decoder targets build from the decoder sources alone; fuzz-dist instruments lib/dist's
# parsers and takes the rest of the library from the tests' archive.
FUZZ_CC ?= clang
FUZZ_TIME ?= 60
FUZZ_TARGETS ?= manifest records codec dist s3xml
FUZZ_FLAGS := -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
	      -std=gnu11 -D_GNU_SOURCE -Iinclude -Ilib
FUZZ_DEC_SRC := lib/format/format.c lib/format/codec.c lib/common/hash.c lib/common/common.c \
		lib/common/dtype.c
FUZZ_DIST_SRC := $(FUZZ_DEC_SRC) lib/dist/dist_layout.c lib/dist/dist_verify.c
$(B)/fuzz/fuzz-%: tests/fuzz/fuzz-%.c $(FUZZ_DEC_SRC)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) $< $(FUZZ_DEC_SRC) -lzstd -lxxhash -o $@
$(B)/fuzz/fuzz-dist: tests/fuzz/fuzz-dist.c $(FUZZ_DIST_SRC) $(TLIB)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) $< $(FUZZ_DIST_SRC) $(TLIB) $(LDLIBS) -o $@
# The S3 backend's XML reader stands alone: its file and the error messages.
$(B)/fuzz/fuzz-s3xml: tests/fuzz/fuzz-s3xml.c lib/remote/s3_xml.c lib/common/common.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) $< lib/remote/s3_xml.c lib/common/common.c -o $@
.PHONY: fuzz
fuzz: $(FUZZ_TARGETS:%=$(B)/fuzz/fuzz-%)
	@fail=0; for t in $(FUZZ_TARGETS); do \
	  case $$t in records) ml=8192;; codec) ml=70000;; *) ml=16384;; esac; \
	  mkdir -p $(B)/fuzz/work-$$t; \
	  $(B)/fuzz/fuzz-$$t -max_total_time=$(FUZZ_TIME) -max_len=$$ml -rss_limit_mb=2048 \
	    -timeout=10 -artifact_prefix=$(B)/fuzz/crash-$$t- $(B)/fuzz/work-$$t \
	    tests/fuzz/corpus/$$t || fail=1; \
	done; \
	if [ $$fail = 0 ]; then echo "fuzz: no crash"; else echo "fuzz: CRASHED (see $(B)/fuzz/crash-*)"; exit 1; fi
