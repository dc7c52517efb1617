#!/usr/bin/env bash
# The exported ABI is exactly the public header: the CKPT_API functions of include/ckpt.h, the
# names in lib/libckpt.map (each under a version node), the dynamic symbols of libckpt.so and the
# global symbols of libckpt.a are one set. And a program that defines functions named like the
# library's internals (pool_init, index_put, manifest_decode, ckpt_fail) links statically against
# libckpt.a and runs a save: nothing internal leaks to collide with a user's names. The release
# libraries carry no test hook and no I/O fault injector.
set -u
cd "$(dirname "$0")/../.."
B=${B:-build}
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

grep -o 'CKPT_API [^;]*(' include/ckpt.h | grep -v __attribute__ |
	sed 's/.*[ *]\(ckpt_[a-z0-9_]*\)(/\1/' | sort > "$tmp/header"
sed -n '/global:/,/local:/p' lib/libckpt.map | grep -o 'ckpt_[a-z0-9_]*' | sort > "$tmp/map"
nm -D --defined-only "$B/lib/libckpt.so" | awk '$3 !~ /^LIBCKPT_/ {sub(/@.*/, "", $3); print $3}' |
	sort > "$tmp/so"
nm -g --defined-only "$B/lib/libckpt.a" | awk 'NF == 3 {print $3}' | sort > "$tmp/a"
[ -s "$tmp/header" ] || { echo "FAIL: no CKPT_API function found in include/ckpt.h"; exit 1; }
for f in map so a; do
	if ! cmp -s "$tmp/header" "$tmp/$f"; then
		echo "FAIL: the $f symbols differ from include/ckpt.h's CKPT_API functions (< header, > $f):"
		diff "$tmp/header" "$tmp/$f" | head -20
		fail=1
	fi
done
grep -q '^LIBCKPT_[0-9]*\.[0-9]* {' lib/libckpt.map || { echo "FAIL: no version node in the map"; fail=1; }
grep -q 'ckpt_\*' lib/libckpt.map && { echo "FAIL: the map exports by glob"; fail=1; }
echo "exports: $(wc -l < "$tmp/header") functions in the header, the map, libckpt.so and libckpt.a"

# No test hook in the release libraries or ckptctl: no *_KILL_AT or *_TEST_* variable.
for l in "$B/lib/libckpt.so" "$B/lib/libckpt.a" "$B/bin/ckptctl"; do
	if strings "$l" | grep -q 'KILL_AT\|_TEST_'; then
		echo "FAIL: $l contains a test hook (a *_KILL_AT or *_TEST_* variable)"
		fail=1
	fi
done

# No I/O fault injector in the release libraries (lib/io/fault.c is the tests' archive's only): no
# symbol of it, defined or referenced, local or global (nm -a reads the full symbol table; the
# names containing "default", ckpt_io_default among them, are not the injector's).
for l in "$B/lib/libckpt.so" "$B/lib/libckpt.a"; do
	if nm -a "$l" 2>/dev/null | awk 'NF >= 2 {print $NF}' | grep -v default | grep -q 'fault'; then
		echo "FAIL: $l contains the I/O fault injector:"
		nm -a "$l" | awk 'NF >= 2 {print $NF}' | grep -v default | grep 'fault' | head -5
		fail=1
	fi
done

cat > "$tmp/user.c" <<'C'
#include <ckpt.h>
#include <stdio.h>
#include <string.h>
/* A user's own functions that happen to share the library's internal names. */
int pool_init(void) { return 1; }
int index_put(void) { return 2; }
int manifest_decode(void) { return 3; }
int ckpt_fail(void) { return 4; }
int workers_create(void) { return 5; }
int main(int argc, char **argv)
{
	ckpt_options *o = ckpt_options_create();
	ckpt_store *s;
	float x[256];
	uint64_t shape[1] = {256};
	ckpt_save *sv;
	memset(x, 0, sizeof x);
	ckpt_options_set(o, CKPT_OPT_CREATE, 1);
	ckpt_tensor t = {.struct_size = sizeof t, .name = "x", .dtype = CKPT_DTYPE_F32, .ndim = 1,
			 .shape = shape, .mem = CKPT_MEM_HOST, .data = x};
	if (argc < 2 || ckpt_store_open(argv[1], o, &s) || ckpt_save_begin(s, 1, NULL, &sv) ||
	    ckpt_save_add(sv, &t) ||
	    ckpt_save_commit(sv, NULL)) {
		fprintf(stderr, "save: %s\n", ckpt_errmsg());
		return 1;
	}
	ckpt_store_close(s);
	ckpt_options_free(o);
	return pool_init() + index_put() + manifest_decode() + ckpt_fail() + workers_create() == 15 ? 0 : 1;
}
C
# shellcheck disable=SC2046
if cc ${SANITIZE:-} -Iinclude "$tmp/user.c" -o "$tmp/user" "$B/lib/libckpt.a" \
	$(pkg-config --libs liburing libzstd libxxhash libcurl) -lpthread -ldl 2>"$tmp/ld.err"; then
	"$tmp/user" "$tmp/store" || { echo "FAIL: the statically linked program failed"; fail=1; }
else
	echo "FAIL: a program with the library's internal names does not link against libckpt.a:"
	head -5 "$tmp/ld.err"
	fail=1
fi
[ $fail = 0 ] && echo "symbols: ok"
exit $fail
