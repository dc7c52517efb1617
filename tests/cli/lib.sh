# Golden-file driver for the ckptctl tests, sourced by tests/cli/t-ckptctl-*.sh (run from the
# repository root by tests/run.sh, with B set to the build directory).
#
#   check NAME CMD [ARGS...]   runs CMD (stdin /dev/null), normalizes its stdout and stderr and
#                              compares them and its exit status with golden/DIR/NAME.{out,err,rc}
#   expect WHAT CMD [ARGS...]  a plain assertion: CMD must succeed
#   finish                     prints the count and exits 0 when every case passed
#
# DIR is the script's name without t-ckptctl- (t-ckptctl-prune.sh: golden/prune/): one folder per
# command or theme. Only expectations that say something are stored: a missing NAME.out or
# NAME.err means that stream must be empty, a missing NAME.rc means exit status 0, so that a case
# which prints where nothing is expected still fails.
#
# GOLDEN_UPDATE=1 rewrites the golden files from the current output instead of comparing: it writes
# the non-empty ones and removes those that became empty or 0 (review the diff before committing).
# Normalized: the store path ($STORE), the scratch directory ($TMP), UTC times, durations, PIDs in
# temporary names, and the JSON fields that vary between runs.
set -u
export LC_ALL=C TZ=UTC
B=${B:-build}
ROOT=$PWD
CK=$ROOT/$B/bin/ckptctl
GOLD=$ROOT/tests/cli/golden
GNAME=$(basename "$0" .sh)
GNAME=${GNAME#t-}
GNAME=${GNAME#ckptctl-}
GDIR=$GOLD/$GNAME
[ -x "$CK" ] || { echo "skip: $CK is not built"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "skip: python3 is needed to make test files"; exit 77; }
T=$(mktemp -d "${TMPDIR:-/tmp}/ckptctl-test.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
STORE=$T/store
cases=0 failed=0
# What an absent expectation stands for: empty output, exit status 0.
: >"$T/.default.out"
: >"$T/.default.err"
echo 0 >"$T/.default.rc"

ckptctl() { "$CK" "$@"; }
mkst() { python3 "$ROOT/tests/cli/mkst.py" "$@"; }
corrupt() { python3 "$ROOT/tests/cli/corrupt.py" "$@"; }

normalize() {
	sed -e "s|$STORE|\$STORE|g" -e "s|$T|\$TMP|g" \
	    -e 's/[0-9]\{4\}-[0-9][0-9]-[0-9][0-9] [0-9][0-9]:[0-9][0-9]:[0-9][0-9]/YYYY-MM-DD HH:MM:SS/g' \
	    -e 's/, [0-9][0-9.]* s$/, N s/' \
	    -e 's/"\(time\|seconds\|snapshot_seconds\|persist_seconds\|wait_seconds\|pool_bytes\|pool_peak\|threads\)": [-0-9.e+]*/"\1": N/' \
	    -e 's/"engine": "[^"]*"/"engine": "E"/' -e 's/"direct_io": [a-z]*/"direct_io": B/' \
	    -e 's/\.tmp-[0-9][0-9]*/.tmp-PID/g' -e 's/(pid [0-9][0-9]*)/(pid PID)/g' -e 's/process [0-9][0-9]* is writing/process PID is writing/g'
}

check() {
	local name=$1 rc ext want bad=0
	shift
	cases=$((cases + 1))
	"$@" >"$T/.out" 2>"$T/.err" </dev/null
	rc=$?
	normalize <"$T/.out" >"$T/.out.n"
	normalize <"$T/.err" >"$T/.err.n"
	echo "$rc" >"$T/.rc.n"
	if [ "${GOLDEN_UPDATE:-0}" = 1 ]; then
		for ext in out err rc; do
			want=$GDIR/$name.$ext
			if cmp -s "$T/.default.$ext" "$T/.$ext.n"; then
				rm -f "$want"
			else
				mkdir -p "$GDIR" && cp "$T/.$ext.n" "$want"
			fi
		done
		echo "updated $name"
		return 0
	fi
	for ext in out err rc; do
		want=$GDIR/$name.$ext
		if [ -f "$want" ]; then
			diff -u --label "golden/$GNAME/$name.$ext" --label "actual" "$want" "$T/.$ext.n"
		else
			diff -u --label "golden/$GNAME/$name.$ext (absent)" --label "actual" \
				"$T/.default.$ext" "$T/.$ext.n"
		fi || bad=1
	done
	if [ $bad = 0 ]; then
		echo "ok   $name"
	else
		echo "FAIL $name: $*"
		failed=$((failed + 1))
	fi
}

expect() {
	local what=$1
	shift
	cases=$((cases + 1))
	if "$@"; then
		echo "ok   $what"
	else
		echo "FAIL $what: $*"
		failed=$((failed + 1))
	fi
}

finish() {
	echo "$cases cases, $failed failed"
	[ "$failed" -eq 0 ]
	exit
}
