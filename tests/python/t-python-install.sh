#!/bin/sh
# Packaging of the Python binding: `make install` puts the package where /usr/bin/python3 finds it
# for PREFIX=/usr/local (checked under DESTDIR) and loads the library it installed (no
# CKPT_LIBRARY, no ldconfig, run away from the source tree); `make uninstall` removes the package;
# `pip install --target DIR ./python` for /usr/bin/python3 (offline, no setuptools) carries its
# library and saves torch tensors. tests/python/t-python-wheel.sh checks wheels and venvs.
set -eu
. "$(dirname "$0")/common.sh"
unset CKPT_LIBRARY VIRTUAL_ENV
export PYTHON=$PY  # /usr/bin/python3's layout, even when the caller's PATH has a venv's python3
root=$(pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')

# 1. PREFIX=/usr/local, staged in DESTDIR: the directory is on /usr/bin/python3's path.
make -s install PREFIX=/usr/local DESTDIR="$tmp/dest" B="$B" >"$tmp/log" 2>&1 || { cat "$tmp/log"; exit 1; }
pkg=$tmp/dest/usr/local/lib/python$ver/dist-packages/libckpt
[ -f "$pkg/__init__.py" ] && [ -f "$pkg/_installed.py" ] || { echo "FAIL: no package in $pkg"; cat "$tmp/log"; exit 1; }
"$PY" -c 'import sys; sys.exit(sys.argv[1] not in sys.path)' "/usr/local/lib/python$ver/dist-packages" ||
	{ echo "FAIL: /usr/local/lib/python$ver/dist-packages is not on $PY's sys.path"; exit 1; }
grep -q "LIBDIR = '/usr/local/lib'" "$pkg/_installed.py" || { echo "FAIL: $pkg/_installed.py:"; cat "$pkg/_installed.py"; exit 1; }

# 2. A prefix of its own: the package finds the library through its installed location.
prefix=$tmp/prefix
make -s install PREFIX="$prefix" B="$B" >"$tmp/log" 2>&1 || { cat "$tmp/log"; exit 1; }
grep -q "is not on $PY's path: use PYTHONPATH=$prefix/lib/python$ver/dist-packages" "$tmp/log" ||
	{ echo "FAIL: no PYTHONPATH note"; cat "$tmp/log"; exit 1; }
cat >"$tmp/use.py" <<'PYEOF'
import sys, torch, libckpt
assert libckpt.__file__.startswith(sys.argv[1]), libckpt.__file__
with libckpt.CheckpointManager(sys.argv[2]) as m:
    m.save(1, {"x": torch.arange(5.0)})
with libckpt.Store(sys.argv[2]) as s:
    assert torch.equal(s.load()["x"], torch.arange(5.0))
print(libckpt.library_path())
PYEOF
cd "$tmp"
lib=$(PYTHONPATH="$prefix/lib/python$ver/dist-packages" "$PY" use.py "$prefix" "$tmp/store1")
[ "$lib" = "$prefix/lib/libckpt.so.0" ] || { echo "FAIL: loaded '$lib', not $prefix/lib/libckpt.so.0"; exit 1; }
echo "make install: package in $prefix/lib/python$ver/dist-packages, library $lib"
cd "$root"
make -s uninstall PREFIX="$prefix" B="$B" >/dev/null
[ ! -e "$prefix/lib/python$ver/dist-packages/libckpt" ] || { echo "FAIL: uninstall left the package"; exit 1; }

# 3. pip, offline (no index; the build needs no package), for /usr/bin/python3 with torch.
if "$PY" -m pip --version >/dev/null 2>&1; then
	PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 "$PY" -m pip install -q \
		--no-deps --target "$tmp/pip" ./python >"$tmp/pip.log" 2>&1 || { cat "$tmp/pip.log"; exit 1; }
	cd "$tmp"
	lib=$(PYTHONPATH="$tmp/pip" "$PY" use.py "$tmp/pip" "$tmp/store2")
	[ "$lib" = "$tmp/pip/libckpt/_native/libckpt.so.0" ] || { echo "FAIL: pip's package loaded '$lib'"; exit 1; }
	echo "pip install: $(ls -d "$tmp"/pip/libckpt-*.dist-info | xargs basename), library $lib"
	cd "$root"
else
	echo "pip missing for $PY: pip install not checked"
fi
echo "python install ok"
