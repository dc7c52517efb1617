#!/bin/sh
# examples/dcp_fsdp2.py, which the docs' DCP blocks quote, runs as written under FSDP2 on 2 gloo
# ranks and resumes bit for bit (tests/python/test_dcp_example.py), on the torch 2.x virtual
# environment (common.sh, use_torch2; skips without it).
set -u
. "$(dirname "$0")/common.sh"
use_torch2
exec "$PY" tests/python/test_dcp_example.py
