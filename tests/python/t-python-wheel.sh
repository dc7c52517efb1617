#!/bin/sh
# The Python package installs like one, offline (--no-index), with pip's
# default build isolation, in fresh virtual environments, used from another directory with
# neither CKPT_LIBRARY nor PYTHONPATH:
#   1. `pip install ./python` builds and carries libckpt.so.0 (and the CUDA provider, loaded from
#      beside it): a NumPy round trip works; the package's library is the one loaded;
#   2. the wheel of `make wheel` (its RECORD right, py3-none-<platform>) installs into a second
#      venv and works; `pip uninstall` removes every file it put;
#   1 and 2 give the `ckptctl` command (the package's entry point running the program the wheel
#      carries): --help and list work from another directory, without LD_LIBRARY_PATH;
#   3. `make install` with that venv active puts the package in the venv's site-packages, loading
#      PREFIX's library; `make uninstall` removes it; `pip install -e ./python` runs the source
#      tree's package with its library;
#   4. without its library the package raises a one-line LibraryNotFoundError naming what to do;
#   5. python/ copied without the C sources is refused in one line; so is an sdist, and a
#      sanitizer-instrumented library is never packaged.
set -eu
. "$(dirname "$0")/common.sh"  # PY, B; skips without numpy and under sanitizer builds
root=$(pwd)
if ! "$PY" -c 'import ensurepip, venv' 2>/dev/null; then
	echo "skip: $PY cannot make virtual environments (apt-get install python3-venv)"; exit 77
fi
unset CKPT_LIBRARY PYTHONPATH VIRTUAL_ENV CKPT_CUDA_MODULE PYTHON
export PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PYTHONDONTWRITEBYTECODE=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/elsewhere"
fail() { echo "FAIL: $*"; exit 1; }
ver=$(sed -n 's/^VERSION_\(MAJOR\|MINOR\|PATCH\) := //p' Makefile | paste -sd.)
# What python/ holds, to check at the end that building left nothing there: git's view in a
# checkout, the file list elsewhere (a tree from `git archive`, as make check-fresh runs it, has
# neither .git nor, on a minimal system, git).
py_state() {
	if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
		git status --porcelain --ignored python
	else
		find python -print | LC_ALL=C sort
	fi
}
before=$(py_state)
cuda=$(make -s --no-print-directory B=build/wheel python-lib-files | grep -c cuda || true)

cat >"$tmp/use.py" <<'PYEOF'
import os, sys
import libckpt
site, store = sys.argv[1], sys.argv[2]
pkg = os.path.dirname(libckpt.__file__)
assert pkg == os.path.join(site, "libckpt"), (pkg, site)
assert libckpt.library_path() == os.path.join(pkg, "_native", "libckpt.so.0"), libckpt.library_path()
assert libckpt.library_version() == libckpt.__version__, libckpt.library_version()
with libckpt.Store(store, create=True) as s:
    if len(sys.argv) > 3:  # NumPy is visible (a venv with --system-site-packages)
        import numpy as np
        x = np.arange(1000, dtype=np.float32).reshape(10, 100)
        s.save({"x": x, "step": 7}, 1)
        got = s.load()
        assert np.array_equal(got["x"], x) and got["step"] == 7, got
    assert s.steps() == ([1] if len(sys.argv) > 3 else []), s.steps()
# The CUDA provider (when shipped) is found beside libckpt.so.0, in the package.
libckpt._lib.load().ckpt_mem_supported(0)
maps = {line.split()[-1] for line in open("/proc/self/maps") if "libckpt" in line}
print(" ".join(sorted(os.path.basename(m) for m in maps if m.startswith(pkg + "/_native/"))))
PYEOF
site_of() { "$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
expect_libs() {  # $1: what use.py printed
	want="libckpt.so.0"
	[ "$cuda" = 0 ] || want="libckpt-cuda.so.0 libckpt.so.0"
	[ "$1" = "$want" ] || fail "libraries loaded from the package: '$1', expected '$want'"
}

# 1. pip install ./python, default build isolation, no index.
"$PY" -m venv --system-site-packages "$tmp/v1"
"$tmp/v1/bin/pip" install -q ./python >"$tmp/pip1.log" 2>&1 || { cat "$tmp/pip1.log"; fail "pip install ./python"; }
site1=$(site_of "$tmp/v1")
libs=$(cd "$tmp/elsewhere" && "$tmp/v1/bin/python" "$tmp/use.py" "$site1" "$tmp/s1" numpy) || fail "use after pip install"
expect_libs "$libs"
echo "pip install ./python: $site1/libckpt, loaded $libs"
# the ckptctl command the README's recipes use: the package's entry point runs the program it
# carries, from anywhere, on the store use.py made
check_ckptctl() {  # VENV STORE
	(cd "$tmp/elsewhere" && env -u LD_LIBRARY_PATH PATH=/usr/bin:/bin "$1/bin/ckptctl" --help) \
		>"$tmp/cc.out" 2>&1 || { cat "$tmp/cc.out"; fail "$1/bin/ckptctl --help"; }
	grep -q "^Usage: ckptctl" "$tmp/cc.out" || { cat "$tmp/cc.out"; fail "ckptctl --help: no usage"; }
	(cd "$tmp/elsewhere" && env -u LD_LIBRARY_PATH "$1/bin/ckptctl" list "$2") >"$tmp/cc.out" 2>&1 ||
		{ cat "$tmp/cc.out"; fail "$1/bin/ckptctl list $2"; }
}
check_ckptctl "$tmp/v1" "$tmp/s1"
echo "pip install ./python: $tmp/v1/bin/ckptctl --help and list work"

# 2. make wheel; a second, clean venv (no system packages).
make -s wheel B="$B" >"$tmp/wheel.log" 2>&1 || { cat "$tmp/wheel.log"; fail "make wheel"; }
plat=$("$PY" -c 'import sysconfig, re; print(re.sub(r"[-.]", "_", sysconfig.get_platform()))')
whl=$B/dist/libckpt-$ver-py3-none-$plat.whl
[ -f "$whl" ] || fail "no $whl ($(ls "$B/dist"))"
"$PY" - "$whl" <<'PYEOF' || fail "$whl's RECORD"
import base64, hashlib, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
di = [n for n in z.namelist() if n.endswith(".dist-info/RECORD")][0].rsplit("/", 1)[0]
rec = {}
for line in z.read(di + "/RECORD").decode().splitlines():
    name, h, size = line.rsplit(",", 2)
    rec[name] = (h, size)
assert set(rec) == set(z.namelist()), set(rec) ^ set(z.namelist())
for name, (h, size) in rec.items():
    if name == di + "/RECORD":
        continue
    data = z.read(name)
    d = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    assert h == "sha256=" + d and int(size) == len(data), name
assert "libckpt/_native/libckpt.so.0" in rec and "Root-Is-Purelib: false" in z.read(di + "/WHEEL").decode()
assert "libckpt/_native/ckptctl" in rec, "the wheel carries no ckptctl"
assert "ckptctl = libckpt._ckptctl:main" in z.read(di + "/entry_points.txt").decode()
PYEOF
"$PY" -m venv --without-pip "$tmp/v2"  # pip of v1 installs into it (saves ensurepip's seconds)
pip2() { "$tmp/v1/bin/pip" --python "$tmp/v2/bin/python" "$@"; }
site2=$(site_of "$tmp/v2")
pip2 install -q "$whl" >"$tmp/pip2.log" 2>&1 || { cat "$tmp/pip2.log"; fail "pip install $whl"; }
libs=$(cd "$tmp/elsewhere" && "$tmp/v2/bin/python" "$tmp/use.py" "$site2" "$tmp/s2") || fail "use of $whl"
expect_libs "$libs"
check_ckptctl "$tmp/v2" "$tmp/s2"
pip2 uninstall -q -y libckpt >"$tmp/pip3.log" 2>&1 || { cat "$tmp/pip3.log"; fail "pip uninstall"; }
left=$(cd "$site2" && ls -d libckpt* 2>/dev/null || true)
[ -z "$left" ] || fail "pip uninstall left $left in $site2"
[ ! -e "$tmp/v2/bin/ckptctl" ] || fail "pip uninstall left $tmp/v2/bin/ckptctl"
echo "make wheel: $(basename "$whl") installs, works and uninstalls in a clean venv"

# 3. make install with the venv active (as `. v2/bin/activate` does) and a prefix of the test's.
prefix=$tmp/prefix
VIRTUAL_ENV=$tmp/v2 PATH=$tmp/v2/bin:$PATH make -s install PREFIX="$prefix" B="$B" >"$tmp/inst.log" 2>&1 ||
	{ cat "$tmp/inst.log"; fail "make install in a venv"; }
grep -q "installed libckpt in $site2 (the virtual environment" "$tmp/inst.log" || { cat "$tmp/inst.log"; fail "no venv install"; }
[ -f "$site2/libckpt/_installed.py" ] || fail "make install did not put the package in $site2"
lib=$(cd "$tmp/elsewhere" && "$tmp/v2/bin/python" -c 'import libckpt; print(libckpt.library_path())') ||
	fail "import after make install"
[ "$lib" = "$prefix/lib/libckpt.so.0" ] || fail "make install's package loaded '$lib', not $prefix/lib/libckpt.so.0"
VIRTUAL_ENV=$tmp/v2 PATH=$tmp/v2/bin:$PATH make -s uninstall PREFIX="$prefix" B="$B" >/dev/null
[ ! -e "$site2/libckpt" ] || fail "make uninstall left $site2/libckpt"
echo "make install in a venv: $site2/libckpt, library $lib; make uninstall removed it"

# 3b. An editable install (PEP 660) imports the source tree's package and loads its library.
pip2 install -q -e ./python >"$tmp/pip5.log" 2>&1 || { cat "$tmp/pip5.log"; fail "pip install -e"; }
got=$(cd "$tmp/elsewhere" && "$tmp/v2/bin/python" -c 'import libckpt; print(libckpt.__file__, libckpt.library_path())') ||
	fail "import after pip install -e"
case $got in
"$root/python/libckpt/__init__.py $root/build/lib/libckpt.so.0" | \
"$root/python/libckpt/__init__.py $root/build/wheel/lib/libckpt.so.0") ;;
*) fail "editable install: $got" ;;
esac
pip2 uninstall -q -y libckpt >/dev/null 2>&1 || fail "pip uninstall of the editable install"
left=$(cd "$site2" && ls -d libckpt* 2>/dev/null || true)
[ -z "$left" ] || fail "pip uninstall left $left in $site2"
echo "pip install -e ./python: $got"

# 4. The library gone from an installed package: import works, first use is one clear line.
rm "$site1/libckpt/_native/libckpt.so.0"
if (cd "$tmp/elsewhere" && "$tmp/v1/bin/python" -c '
import libckpt
try:
    libckpt.library_path()
except libckpt.LibraryNotFoundError as e:
    print(e)
    raise SystemExit(0)
raise SystemExit("loaded " + libckpt.library_path())' >"$tmp/err" 2>&1); then :; else cat "$tmp/err"; fail "no LibraryNotFoundError"; fi
[ "$(wc -l <"$tmp/err")" = 1 ] || { cat "$tmp/err"; fail "the error is not one line"; }
for want in "cannot find or load libckpt.so.0" "$site1/libckpt/_native (the package)" \
	    "pip install ./python" "make install" "CKPT_LIBRARY="; do
	grep -qF "$want" "$tmp/err" || { cat "$tmp/err"; fail "the error does not say '$want'"; }
done
! grep -q "build/lib" "$tmp/err" || { cat "$tmp/err"; fail "the error names a build tree"; }
echo "missing library: $(cut -c1-100 "$tmp/err")..."

# 5. Refusals: python/ without the C sources, an sdist, a sanitizer library.
cp -r python "$tmp/alone"
if "$tmp/v1/bin/pip" install "$tmp/alone" >"$tmp/pip4.log" 2>&1; then fail "python/ alone installed"; fi
grep -q "libckpt build: $tmp/alone is not inside a libckpt source tree" "$tmp/pip4.log" || { cat "$tmp/pip4.log"; fail "no refusal"; }
! grep -q Traceback "$tmp/pip4.log" || { cat "$tmp/pip4.log"; fail "a traceback for python/ alone"; }
cd python/_backend
out=$("$PY" -c 'import libckpt_build as b; b.build_sdist(".")' 2>&1) && fail "an sdist was made"
echo "$out" | grep -q "^libckpt build: no sdist" || fail "sdist refusal: $out"
echo 'int f(void) { return 0; }' >"$tmp/f.c"
cc -shared -fPIC -fsanitize=address -Wl,-soname,libckpt.so.0 "$tmp/f.c" -o "$tmp/libckpt.so.0"
out=$("$PY" -c 'import sys, libckpt_build as b; b._check_library(sys.argv[1], "libckpt.so.0")' "$tmp/libckpt.so.0" 2>&1) &&
	fail "a sanitizer library passed the wheel's check"
echo "$out" | grep -q "needs libasan" || fail "sanitizer refusal: $out"
cd "$root"
after=$(py_state)
[ "$after" = "$before" ] || fail "files left in python/: $(printf '%s\n' "$after" | grep -vxF "$before")"
echo "refusals ok; python wheel ok"
