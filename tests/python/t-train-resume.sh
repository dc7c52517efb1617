#!/bin/sh
# examples/train_resume.py killed with SIGKILL at a random step resumes from the latest
# checkpoint and ends like an uninterrupted run (tests/python/check_train_resume.py).
set -u
. "$(dirname "$0")/common.sh"
exec "$PY" tests/python/check_train_resume.py
