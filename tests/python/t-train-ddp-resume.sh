#!/bin/sh
# examples/train_ddp_resume.py on 4 gloo processes, one SIGKILLed after a checkpoint was started,
# resumes on 2 processes from the latest durable checkpoint with the saved parameters and the
# resharded EMA, and ends like an uninterrupted run (tests/python/check_train_ddp.py).
set -u
. "$(dirname "$0")/common.sh"
if ! "$PY" -c 'import torch.distributed as d; import sys; sys.exit(not (d.is_available() and d.is_gloo_available()))'; then
	echo "skip: this torch has no torch.distributed gloo backend"; exit 77
fi
exec "$PY" tests/python/check_train_ddp.py
