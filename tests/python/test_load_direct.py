"""Store.load places host tensors of 1 MiB and more where libckpt restores raw chunks straight
into them: CKPT_RESTORE_DIRECT_OFFSET (64) bytes past a 4 KiB boundary, torch tensors
and numpy arrays alike, with the same dtype, shape and bytes, each its own memory; small ones
are allocated as before.

Run: /usr/bin/python3 tests/python/test_load_direct.py (tests/python/t-python-load-direct.sh).
"""

import os
import shutil
import sys
import tempfile
import unittest

import numpy as np
import torch

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))
import libckpt  # noqa: E402

MiB = 1 << 20


def ptr(x):
    return x.data_ptr() if isinstance(x, torch.Tensor) else x.__array_interface__["data"][0]


class LoadDirect(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="libckpt-py-direct-")
        self.store = libckpt.Store(os.path.join(self.dir, "s"), create=True, pool_size="32M",
                                   threads=2)

    def tearDown(self):
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_placement_and_bytes(self):
        g = torch.Generator().manual_seed(3)
        state = {
            "w": torch.randn(1024, 1100, generator=g).to(torch.bfloat16),   # 2.1 MiB, bf16
            "m": torch.randn(3, 300000, generator=g),                          # 3.4 MiB, fp32
            "i": torch.randint(0, 1 << 40, (200000,), generator=g),           # 1.5 MiB, int64
            "small": torch.randn(1000, generator=g),
            "np": np.random.default_rng(4).standard_normal((700, 500)),        # 2.7 MiB, f64
            "np_small": np.arange(10, dtype=np.int16),
        }
        self.store.save(state, 1)
        out = self.store.load(1)
        for k, v in state.items():
            o = out[k]
            self.assertIs(type(o), type(v), k)
            self.assertEqual(o.dtype, v.dtype, k)
            self.assertEqual(tuple(o.shape), tuple(v.shape), k)
            if isinstance(v, torch.Tensor):
                self.assertTrue(torch.equal(o, v), k)
                nb = o.numel() * o.element_size()
            else:
                self.assertEqual(o.tobytes(), v.tobytes(), k)
                nb = o.nbytes
            if nb >= MiB:
                self.assertEqual(ptr(o) % 4096, 64, f"{k} is not placed for the direct restore")
        # get_slice allocates for part of a tensor's shape: sized from that part
        part = self.store.get_slice("m")[1:3]
        self.assertTrue(torch.equal(part, state["m"][1:3]))
        self.assertEqual(ptr(part) % 4096, 64)
        # each its own memory: writing one leaves the others and a second load as they were
        out["w"].zero_()
        out["np"][:] = 0
        self.assertTrue(torch.equal(out["m"], state["m"]))
        again = self.store.load(1)
        self.assertTrue(torch.equal(again["w"], state["w"]))
        self.assertEqual(again["np"].tobytes(), state["np"].tobytes())


if __name__ == "__main__":
    unittest.main()
