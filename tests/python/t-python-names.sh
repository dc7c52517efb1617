#!/bin/sh
# Tensor names as PyTorch writes them (tests/python/test_names.py): state_dict keys as dotted
# names in tensors(), load(keys=) prefixes on whole components, get_slice by dotted name and of a
# sharded global tensor (2 gloo ranks), collisions refused naming both entries, exact round trips,
# and a store of the old escaped names (tests/python/data/oldnames-store.tar.gz) still read.
set -u
. "$(dirname "$0")/common.sh"
exec "$PY" tests/python/test_names.py
