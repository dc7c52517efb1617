#!/bin/sh
# Multi-rank checkpoints from torch.distributed (tests/python/test_dist.py): 4 gloo ranks on one
# machine save row shards, replicated and single-rank tensors (incremental per-rank stats,
# save_async), one process loads the global tensors, 2 ranks restore by columns, and a rank
# SIGKILLed in the middle of its save makes the others raise naming it with nothing committed, a
# hung rank makes them raise after the group's timeout, failures on a live rank raise everywhere.
set -u
. "$(dirname "$0")/common.sh"
exec "$PY" tests/python/test_dist.py
