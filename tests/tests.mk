# Tests: unit programs in tests/unit/*.c (one per module; they may include lib/ internals and link
# the static library), scripts tests/*/t-*.sh. `make check` runs them all through tests/run.sh.
TEST_UNIT_SRC := $(sort $(wildcard tests/unit/t-*.c))
TEST_BINS     := $(TEST_UNIT_SRC:tests/unit/%.c=$(B)/tests/bin/%)
TEST_HELPERS  := $(sort $(wildcard tests/unit/helpers/*.c))
TEST_EXTRA    ?=

$(B)/tests/bin/%: tests/unit/%.c $(TEST_HELPERS) $(wildcard tests/unit/*.h) $(wildcard tests/fuzz/*.c) $(ALIB)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Ilib -Itests/unit $< $(TEST_HELPERS) -o $@ $(ALL_LDFLAGS) $(ALIB) $(LDLIBS)

tests: all $(TEST_BINS) $(TEST_EXTRA)

check: test-deps
	$(MAKE) tests
	tests/run.sh

# Sanitizer runs: a separate build tree so that objects do not mix.
sanitize: test-deps
	$(MAKE) B=build/asan SANITIZE="-fsanitize=address,undefined -fno-omit-frame-pointer" tests
	B=build/asan ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 tests/run.sh
