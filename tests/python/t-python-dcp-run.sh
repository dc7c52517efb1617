#!/bin/sh
# A DCP user's first run (tests/python/test_dcp_run.py: the first async_save into a missing store,
# a failing rank reported as failing, DCP's tutorial AppState restored as DTensors on 2, 4 and 1
# ranks), on the torch
# 2.x virtual environment (common.sh, use_torch2; skips without it).
set -u
. "$(dirname "$0")/common.sh"
use_torch2
exec "$PY" tests/python/test_dcp_run.py "$@"
