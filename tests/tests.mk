# Tests: unit programs in tests/unit/FOLDER/t-NAME.c, FOLDER the lib/ folder whose code the test
# mainly exercises (they may include lib/ internals and link TLIB, the library's objects with their
# internal symbols; the headers and helpers they share stay in tests/unit, -Itests/unit), and
# scripts tests/*/t-*.sh. Each program builds as $(B)/tests/bin/t-NAME, the name tests/run.sh and
# the scripts use, so NAME is unique across folders. `make check` runs them all through
# tests/run.sh, `make check-quick` all but those tests/slow.list names.
TEST_UNIT_SRC := $(sort $(wildcard tests/unit/*/t-*.c))
TEST_BINS     := $(addprefix $(B)/tests/bin/,$(basename $(notdir $(TEST_UNIT_SRC))))
TEST_HELPERS  := $(sort $(wildcard tests/unit/helpers/*.c))
TEST_EXTRA    ?=
# A program left directly in tests/unit would be neither built nor run: say so instead.
$(if $(wildcard tests/unit/t-*.c),$(error $(wildcard tests/unit/t-*.c): a unit test goes in \
  tests/unit/FOLDER/, FOLDER the lib/ folder it mainly exercises (tests/README.md)))
$(if $(filter-out $(words $(TEST_BINS)),$(words $(sort $(TEST_BINS)))),$(error two unit tests \
  share a name (each builds as $(B)/tests/bin/t-NAME): $(sort $(foreach b,$(TEST_BINS),$(if \
  $(filter-out 1,$(words $(filter $(b),$(TEST_BINS)))),$(notdir $(b)))))))

define unit_test_rule
$(B)/tests/bin/$(basename $(notdir $(1))): $(1) $$(TEST_HELPERS) $$(wildcard tests/unit/*.h) \
  $$(wildcard tests/fuzz/*.c) $$(TLIB)
	@mkdir -p $$(dir $$@)
	$$(CC) $$(ALL_CFLAGS) -Ilib -Itests/unit $$< $$(TEST_HELPERS) -o $$@ $$(ALL_LDFLAGS) \
	  $$(TLIB) $$(LDLIBS)
endef
$(foreach s,$(TEST_UNIT_SRC),$(eval $(call unit_test_rule,$(s))))

# ckptctl with the test hooks (CKPT_GC_KILL_AT; CKPTCTL_TEST_TRUNCATE_INPUT) for the crash and
# import-safety tests; not installed.
# Its sources in HOOK_CLI_SRC are compiled again with CKPT_TEST_HOOKS (CKPTCTL_TEST_TRUNCATE_INPUT,
# CKPTCTL_TEST_DIRECT, CKPTCTL_TEST_READ_STATS).
HOOK_CKPTCTL := $(B)/tests/hooks/ckptctl
HOOK_CLI_SRC := cli/ckptctl/export.c cli/ckptctl/import.c cli/ckptctl/xfer.c
HOOK_CKPTCTL_OBJ := $(filter-out $(HOOK_CLI_SRC:%.c=$(B)/obj/%.o),$(CKPTCTL_OBJ)) \
		    $(HOOK_CLI_SRC:%.c=$(B)/obj/hooks/%.o)
$(B)/obj/hooks/cli/%.o: cli/%.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -DCKPT_TEST_HOOKS $(DEPFLAGS) -Icli/common -c $< -o $@
$(HOOK_CKPTCTL): $(HOOK_CKPTCTL_OBJ) $(CLI_COMMON_OBJ) $(TLIB)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_LDFLAGS) -o $@ $(HOOK_CKPTCTL_OBJ) $(CLI_COMMON_OBJ) $(TLIB) $(LDLIBS)
TEST_EXTRA += $(HOOK_CKPTCTL)

# Makes multi-rank checkpoints (threads as ranks) for the ckptctl tests: public API only.
MKDIST := $(B)/tests/bin/mkdist
$(MKDIST): tests/cli/mkdist.c tests/unit/t-dist-tcomm.h $(B)/lib/libckpt.so
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $< -o $@ $(ALL_LDFLAGS) -L$(B)/lib -lckpt -Wl,-rpath,'$$ORIGIN/../../lib' -lpthread
TEST_EXTRA += $(MKDIST)

# Sets one metadata value of a manifest file (its checksum follows), to forge damaged metadata.
MFSET := $(B)/tests/bin/mfset
$(MFSET): tests/cli/mfset.c $(TEST_HELPERS) tests/unit/t-mf-rewrite.h $(TLIB)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Ilib -Itests/unit $< $(TEST_HELPERS) -o $@ $(ALL_LDFLAGS) $(TLIB) $(LDLIBS)
TEST_EXTRA += $(MFSET)

# The S3 backend against a real radosgw (tests/s3/t-s3-*.sh start one and run it): not a t-*
# program, since without a server it has nothing to do.
S3OPS := $(B)/tests/bin/s3ops
$(S3OPS): tests/s3/s3ops.c $(TEST_HELPERS) $(TLIB)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Ilib -Itests/unit $< $(TEST_HELPERS) -o $@ $(ALL_LDFLAGS) $(TLIB) $(LDLIBS)
TEST_EXTRA += $(S3OPS)

# The option tables of cli/common (parser, --help, __complete), linked with its objects only.
$(B)/tests/bin/t-cli-opts: tests/cli/t-cli-opts.c $(CLI_COMMON_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Icli/common $< $(CLI_COMMON_OBJ) -o $@ $(ALL_LDFLAGS)
TEST_EXTRA += $(B)/tests/bin/t-cli-opts

tests: all $(TEST_BINS) $(TEST_EXTRA)

check: test-deps
	$(MAKE) tests
	tests/run.sh

# The quick tier: the same setup, then every test but those tests/slow.list names (a new test is
# quick until listed there). For the edit-build-test loop; `make check` stays the full suite.
.PHONY: check-quick
check-quick: test-deps
	$(MAKE) tests
	tests/run.sh --quick

# Sanitizer runs: a separate build tree so that objects do not mix.
# SANITIZE goes to the tests' environment too, so that a script that runs make (t-install) keeps
# the instrumented objects instead of relinking them without the runtime; verify_asan_link_order=0
# lets an uninstrumented program (the install test's pkg-config client) load the instrumented
# library.
ASAN_FLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer
sanitize: test-deps
	$(MAKE) B=build/asan SANITIZE="$(ASAN_FLAGS)" tests
	B=build/asan SANITIZE="$(ASAN_FLAGS)" ASAN_OPTIONS=detect_leaks=1:verify_asan_link_order=0 \
	  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 tests/run.sh

# ThreadSanitizer over the tests that drive the save pipeline's threads (workers, slab grants, I/O
# engines, parallel restore; t-pipe-engines runs both engines), in their own build tree. A data
# race fails the test (TSan exits 66); logs in build/tsan/tests/logs. TSAN_TESTS and TSAN_OPTIONS
# may be overridden. Not part of `make check`: with `make sanitize` it takes several minutes.
TSAN_TESTS ?= t-pipeline t-uring-reuse t-async t-roundtrip t-incremental t-corrupt t-faults t-pipe-engines t-dist-storm t-pipe-grant t-restore-inflight
TSAN_FLAGS := -fsanitize=thread -fno-omit-frame-pointer
tsan: test-deps
	$(MAKE) B=build/tsan SANITIZE="$(TSAN_FLAGS)" $(TSAN_TESTS:%=build/tsan/tests/bin/%)
	@fail=0; for t in $(TSAN_TESTS); do \
	  B=build/tsan TSAN_OPTIONS="second_deadlock_stack=1 $(TSAN_OPTIONS)" tests/run.sh $$t || fail=1; \
	done; \
	if [ $$fail = 0 ]; then echo "tsan: all passed"; else echo "tsan: FAILED"; exit 1; fi

# Power-cut test, long run (tests/crash/t-powercut.sh): saves, prunes and gcs on ext4 over
# dm-log-writes in the QEMU guest, the log replayed to every flush point and each checked.
# `make check` runs the same test on every 6th point and every point where a commit was reported.
.PHONY: check-crash
check-crash: test-deps
	$(MAKE) tests
	CKPT_CRASH_LONG=1 tests/run.sh t-powercut
