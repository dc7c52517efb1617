#!/bin/sh
# CheckpointManager(path, group=True) on gloo ranks (tests/python/test_manager_dist.py): one loop
# run unchanged on 4 ranks keeps exactly the expected steps (interval, max_to_keep, keep_period,
# async saves), resumes on 2 ranks, delete(step) on every rank, the best N by rank 0's metrics
# (also after a restart), and SIGTERM on one rank makes every rank save the same step.
set -u
. "$(dirname "$0")/common.sh"
exec "$PY" tests/python/test_manager_dist.py
