#!/bin/sh
# Installs (or, with the argument `uninstall`, removes) the Python package; run by `make install`
# and `make uninstall` as
#   PREFIX=... LIBDIR=... DESTDIR=... [PYTHONDIR=...] [PYTHON=...] sh python/install.sh [uninstall]
# Where the package goes:
#   - PYTHONDIR when set;
#   - else, in an active virtual environment ($VIRTUAL_ENV, or a `python3` on PATH whose
#     sys.prefix is not its sys.base_prefix; $PYTHON when set) and without DESTDIR: that
#     environment's site-packages (sysconfig's purelib). A staged (DESTDIR) install is for a
#     package of the system, never for the builder's environment;
#   - else where /usr/bin/python3 ($PYTHON) finds it: PREFIX=/usr/local (the default):
#     /usr/local/lib/python3.X/dist-packages, on Debian's sys.path; PREFIX=/usr:
#     /usr/lib/python3/dist-packages; another prefix: PREFIX/lib/python3.X/dist-packages, with a
#     note naming the PYTHONPATH it needs.
# The package records LIBDIR (libckpt/_installed.py) and loads LIBDIR/libckpt.so.0 from there,
# so it needs neither ldconfig nor LD_LIBRARY_PATH. Uninstalling removes a package only where
# _installed.py marks it as make install's (a pip-installed one is left to `pip uninstall`).
# Without the interpreter it does nothing.
set -eu
: "${PREFIX:?}" "${LIBDIR:?}"
DESTDIR=${DESTDIR:-}
PYTHONDIR=${PYTHONDIR:-}
action=${1:-install}

is_venv() { "$1" -c 'import sys; sys.exit(sys.prefix == sys.base_prefix)' 2>/dev/null; }

if [ -n "${PYTHON:-}" ]; then
	PY=$PYTHON
elif [ -n "${VIRTUAL_ENV:-}" ] && [ -x "$VIRTUAL_ENV/bin/python" ]; then
	PY=$VIRTUAL_ENV/bin/python
elif p=$(command -v python3 2>/dev/null) && is_venv "$p"; then
	PY=$p
else
	PY=/usr/bin/python3
fi
if [ ! -x "$PY" ] && ! command -v "$PY" >/dev/null 2>&1; then
	echo "python/install.sh: no $PY: the Python binding is not ${action}ed"
	exit 0
fi
ver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
where=""
if [ -z "$PYTHONDIR" ]; then
	if [ -z "$DESTDIR" ] && is_venv "$PY"; then
		PYTHONDIR=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
		where=" (the virtual environment of $PY)"
	else
		case $PREFIX in
		/usr) PYTHONDIR=/usr/lib/python3/dist-packages ;;
		*) PYTHONDIR=$PREFIX/lib/python$ver/dist-packages ;;
		esac
	fi
fi
dst=$DESTDIR$PYTHONDIR/libckpt

if [ "$action" = uninstall ]; then
	# Also what an install for another Python 3 version left under PREFIX.
	for d in "$dst" "$DESTDIR$PREFIX"/lib/python3*/dist-packages/libckpt; do
		[ -d "$d" ] || continue
		if [ -f "$d/_installed.py" ]; then
			rm -rf "$d"
			echo "python: removed $d"
		else
			echo "python: $d was not installed by make install: left (pip uninstall libckpt removes it)"
		fi
	done
	exit 0
fi

src=$(dirname "$0")/libckpt
install -d "$dst"
rm -f "$dst"/*.py
rm -rf "$dst/_native"  # a wheel's libraries would shadow LIBDIR's (libckpt/_lib.py's search)
install -m 644 "$src"/*.py "$dst"/
printf '# Written by `make install`: where it installed libckpt.so.0.\nLIBDIR = %s\n' \
	"$("$PY" -c 'import sys; print(repr(sys.argv[1]))' "$LIBDIR")" > "$dst/_installed.py"
echo "python: installed libckpt in $PYTHONDIR$where (library from $LIBDIR)"
if [ -z "$where" ] && ! "$PY" -c 'import sys; sys.exit(sys.argv[1] not in sys.path)' "$PYTHONDIR"; then
	echo "python: $PYTHONDIR is not on $PY's path: use PYTHONPATH=$PYTHONDIR"
fi
