#!/bin/sh
# Installs the Python package where /usr/bin/python3 finds it; run by `make install` as
#   PREFIX=... LIBDIR=... DESTDIR=... [PYTHONDIR=...] sh python/install.sh
# PREFIX=/usr/local (the default): /usr/local/lib/python3.X/dist-packages, on Debian's sys.path;
# PREFIX=/usr: /usr/lib/python3/dist-packages; another prefix: PREFIX/lib/python3.X/dist-packages,
# with a note naming the PYTHONPATH it needs.  PYTHONDIR overrides the directory.
# The package records LIBDIR (libckpt/_installed.py) and loads LIBDIR/libckpt.so.0 from there,
# so it needs neither ldconfig nor LD_LIBRARY_PATH.  Without /usr/bin/python3 it does nothing.
set -eu
PY=${PYTHON:-/usr/bin/python3}
: "${PREFIX:?}" "${LIBDIR:?}"
DESTDIR=${DESTDIR:-}
if [ ! -x "$PY" ]; then
	echo "python/install.sh: no $PY: the Python binding is not installed"
	exit 0
fi
ver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [ -z "${PYTHONDIR:-}" ]; then
	case $PREFIX in
	/usr) PYTHONDIR=/usr/lib/python3/dist-packages ;;
	*) PYTHONDIR=$PREFIX/lib/python$ver/dist-packages ;;
	esac
fi
dst=$DESTDIR$PYTHONDIR/libckpt
src=$(dirname "$0")/libckpt
install -d "$dst"
rm -f "$dst"/*.py
install -m 644 "$src"/*.py "$dst"/
printf '# Written by `make install`: where it installed libckpt.so.0.\nLIBDIR = %s\n' \
	"$("$PY" -c 'import sys; print(repr(sys.argv[1]))' "$LIBDIR")" > "$dst/_installed.py"
echo "python: installed libckpt in $PYTHONDIR (library from $LIBDIR)"
if ! "$PY" -c 'import sys; sys.exit(sys.argv[1] not in sys.path)' "$PYTHONDIR"; then
	echo "python: $PYTHONDIR is not on $PY's path: use PYTHONPATH=$PYTHONDIR"
fi
