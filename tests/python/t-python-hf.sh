#!/bin/sh
# Hugging Face interop: ckptctl export --select model of small transformers models (one process,
# and FSDP2 + dcp.save through libckpt.dcp) read back by safetensors' reader and from_pretrained
# (tests/python/test_hf.py), on the torch 2.x virtual environment (common.sh, use_torch2; skips
# without it or without transformers and safetensors).
set -u
. "$(dirname "$0")/common.sh"
use_torch2
exec "$PY" tests/python/test_hf.py
