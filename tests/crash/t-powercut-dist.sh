#!/usr/bin/env bash
# Power-cut test of multi-rank commits: as t-powercut (the QEMU guest of tests/crash/
# powercut-lib.sh recording with dm-log-writes, the log replayed to flush points), with 4-rank
# saves by tests/cli/mkdist (threads as ranks, public API), an aborted one, a prune and a gc
# (tests/crash/powercut-dist-guest.sh). At each point checked: every checkpoint whose commit was
# reported is listed and verifies with its parts, nothing is partially visible, and no chunk
# lies in a missing pack. `make check` checks every 12th flush point (4 ranks make twice the
# points of t-powercut's saves: 130 to 140) and every point where a mark appeared;
# CKPT_CRASH_LONG=1 (`make check-crash`) every point.
# Exit: 0 pass, 1 fail, 77 skip (tools missing, or the kernel package cannot be fetched).
set -euo pipefail
cd "$(dirname "$0")/../.."
PC_EVERY=12
. tests/crash/powercut-lib.sh
MKDIST=$ROOT/$B/tests/bin/mkdist
[ -x "$MKDIST" ] || { echo "FAIL: $MKDIST not built (make tests)"; exit 1; }
pc_setup
# Its rpath ($ORIGIN/../../lib) finds /opt/ckpt/lib/libckpt.so.0.
install_elf "$MKDIST" /opt/ckpt/tests/bin/mkdist
pc_boot tests/crash/powercut-dist-guest.sh
fail=0
pc_verdict_setup
pc_verdict_replay "power cut, 4-rank commits" 6 "3 4"
echo "$(res checks) checks (each listed step committed or in flight, never the aborted one; each committed one listed;" \
	"verify --all, parts included) at the points checked"
exit $fail
