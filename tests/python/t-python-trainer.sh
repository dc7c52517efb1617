#!/bin/sh
# The binding's trainer-facing tests (tests/python/test_trainer.py: Stateful objects, strict=False
# reporting, CheckpointManager, shared storage, partial loads) with /usr/bin/python3.
set -u
. "$(dirname "$0")/common.sh"
exec "$PY" tests/python/test_trainer.py
