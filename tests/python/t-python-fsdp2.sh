#!/bin/sh
# FSDP2 / DTensor state dicts (get_state_dict / set_state_dict) saved by libckpt's own API on 2
# gloo ranks and restored bit for bit on 4 and 1 (tests/python/test_fsdp2.py), on the torch 2.x
# virtual environment (common.sh, use_torch2; skips without it).
set -u
. "$(dirname "$0")/common.sh"
use_torch2
exec "$PY" tests/python/test_fsdp2.py
