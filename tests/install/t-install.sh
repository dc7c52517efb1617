#!/usr/bin/env bash
# `make install` puts a usable library there: header, libraries with soname, pkg-config file,
# binaries, man pages, completion; a program built with pkg-config runs against it; `make
# uninstall` then leaves no file behind.
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${B:-build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
# The Python package goes under the prefix too, never into a virtual environment the caller has
# active (python/install.sh installs there when one is).
export PYTHON=/usr/bin/python3
unset VIRTUAL_ENV
make -s install PREFIX="$prefix" B="$B" >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; exit 1; }
for f in include/ckpt.h lib/libckpt.so lib/libckpt.so.0 lib/libckpt.a lib/pkgconfig/libckpt.pc \
	 bin/ckptctl share/man/man1/ckptctl.1 share/bash-completion/completions/ckptctl; do
	[ -e "$prefix/$f" ] || { echo "missing after install: $f"; exit 1; }
done
soname=$(readelf -d "$prefix/lib/libckpt.so" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
[ "$soname" = libckpt.so.0 ] || { echo "soname is '$soname'"; exit 1; }
# Only the API is exported.
bad=$(nm -D --defined-only "$prefix/lib/libckpt.so" | awk '$3 !~ /^(ckpt_|LIBCKPT)/ {print $3}')
[ -z "$bad" ] || { echo "unexpected exported symbols: $bad"; exit 1; }
cat >"$tmp/use.c" <<'C'
#include <ckpt.h>
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv)
{
	ckpt_options *o = ckpt_options_create();
	ckpt_options_set(o, CKPT_OPT_CREATE, 1);
	ckpt_options_set(o, CKPT_OPT_POOL_SIZE, 8 << 20);
	ckpt_store *s;
	if (ckpt_store_open(argv[1], o, &s)) { fprintf(stderr, "%s\n", ckpt_errmsg()); return 1; }
	ckpt_options_free(o);
	float x[3] = {1, 2, 3}, y[3] = {0};
	uint64_t shape[1] = {3};
	ckpt_tensor t = {.struct_size = sizeof t, .name = "x", .dtype = CKPT_DTYPE_F32, .ndim = 1,
			 .shape = shape, .mem = CKPT_MEM_HOST, .data = x};
	ckpt_save *sv;
	if (ckpt_save_begin(s, 1, NULL, &sv) || ckpt_save_add(sv, &t) ||
	    ckpt_save_commit(sv, NULL)) { fprintf(stderr, "%s\n", ckpt_errmsg()); return 1; }
	ckpt_reader *r;
	if (ckpt_reader_open(s, CKPT_STEP_LATEST, 0, &r) ||
	    ckpt_reader_read(r, 0, NULL, CKPT_MEM_HOST, y, sizeof y))
		return 1;
	ckpt_reader_close(r);
	ckpt_store_close(s);
	printf("libckpt %s ok %d\n", ckpt_version(), !memcmp(x, y, sizeof x));
	return memcmp(x, y, sizeof x) != 0;
}
C
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
cc "$tmp/use.c" $(pkg-config --cflags --libs libckpt) -Wl,-rpath,"$prefix/lib" -o "$tmp/use"
out=$("$tmp/use" "$tmp/store")
echo "$out"
[ "$out" = "libckpt $(pkg-config --modversion libckpt) ok 1" ]
"$prefix/bin/ckptctl" list "$tmp/store" | grep -q '^ *1 '
# `make uninstall` removes every file `make install` put (only empty directories stay).
make -s uninstall PREFIX="$prefix" B="$B" >"$tmp/uninstall.log" 2>&1 || { cat "$tmp/uninstall.log"; exit 1; }
left=$(find "$prefix" ! -type d | sed "s|^$prefix/||" | sort)
[ -z "$left" ] || { echo "left after make uninstall:"; echo "$left"; exit 1; }
echo "install ok"
