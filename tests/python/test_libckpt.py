"""Tests of the Python binding (python/libckpt), with the standard library's unittest.

Run: /usr/bin/python3 tests/python/test_libckpt.py   (from the repository root; tests/python/
t-python.sh does it in `make check`).  CKPT_LIBRARY selects the library (default: build/lib).
"""

import ctypes
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import unittest
from unittest import mock

import numpy as np
import torch

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))
import libckpt  # noqa: E402
from libckpt import _lib as L  # noqa: E402

MiB = 1 << 20


class Base(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="libckpt-py-")
        self.path = os.path.join(self.dir, "store")
        self.store = libckpt.Store(self.path, create=True, pool_size="32M", threads=2)

    def tearDown(self):
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def assertSame(self, a, b, msg=None):
        """Equal type, dtype, shape and bytes (NaN-safe)."""
        self.assertIs(type(a), type(b), msg)
        if isinstance(a, torch.Tensor):
            self.assertEqual(a.dtype, b.dtype, msg)
            self.assertEqual(tuple(a.shape), tuple(b.shape), msg)
            self.assertEqual(a.device.type, "cpu")
            self.assertTrue(torch.equal(a.view(torch.uint8) if a.numel() and a.dim() else a,
                                        b.view(torch.uint8) if b.numel() and b.dim() else b), msg)
        else:
            self.assertEqual(a.dtype, b.dtype, msg)
            self.assertEqual(a.shape, b.shape, msg)
            self.assertEqual(a.tobytes(), b.tobytes(), msg)


class RoundTrip(Base):
    def test_torch_dtypes(self):
        g = torch.Generator().manual_seed(1)
        state = {
            "f16": torch.randn(7, 5, generator=g).half(),
            "bf16": torch.randn(3, 1000, generator=g).bfloat16(),
            "f32": torch.randn(33, generator=g),
            "f64": torch.randn(2, 3, 4, generator=g).double(),
            "i64": torch.randint(-2**62, 2**62, (17,), generator=g),
            "i32": torch.randint(-2**31, 2**31 - 1, (4, 4), generator=g, dtype=torch.int32),
            "i16": torch.randint(-2**15, 2**15 - 1, (9,), generator=g, dtype=torch.int16),
            "i8": torch.randint(-128, 127, (9,), generator=g, dtype=torch.int8),
            "u8": torch.randint(0, 255, (3, 3), generator=g, dtype=torch.uint8),
            "bool": torch.rand(11, generator=g) > 0.5,
            "scalar0d": torch.tensor(3.25),
            "int0d": torch.tensor(7),
            "empty": torch.empty(0, 3),
            "empty_i64": torch.empty(0, dtype=torch.int64),
            "nan": torch.tensor([float("nan"), float("inf"), -0.0]),
        }
        for name in ("float8_e5m2", "float8_e4m3fn"):
            if hasattr(torch, name):
                state[name] = torch.randn(8, generator=g).to(getattr(torch, name))
        st = self.store.save(state, 1)
        self.assertEqual(st.tensors, len(state))
        out = self.store.load(1)
        self.assertEqual(list(out), list(state))
        for k in state:
            self.assertSame(out[k], state[k], k)
        dtypes = {t["name"]: t["dtype"] for t in self.store.tensors(1)}
        self.assertEqual(dtypes["bf16"], "BF16")
        self.assertEqual(dtypes["f16"], "F16")
        self.assertEqual(dtypes["bool"], "BOOL")
        self.assertEqual(out["scalar0d"].dim(), 0)

    def test_numpy(self):
        rng = np.random.default_rng(0)
        state = {"f32": rng.standard_normal((5, 6)).astype(np.float32),
                 "f16": rng.standard_normal(10).astype(np.float16),
                 "u16": np.arange(10, dtype=np.uint16), "u32": np.arange(3, dtype=np.uint32),
                 "u64": np.array([2**64 - 1], dtype=np.uint64), "i64": np.arange(-3, 3),
                 "bool": np.array([True, False]), "zero_d": np.array(2.5),
                 "empty": np.zeros((0, 4), np.float64),
                 "big_endian": np.arange(4, dtype=">i4"),
                 "fortran": np.asfortranarray(rng.standard_normal((4, 3)))}
        self.store.save(state, 2)
        out = self.store.load()
        for k, v in state.items():
            self.assertIsInstance(out[k], np.ndarray, k)
            np.testing.assert_array_equal(out[k], v, err_msg=k)
            self.assertEqual(out[k].shape, v.shape)
        self.assertEqual(out["big_endian"].dtype, np.dtype("int32"))

    def test_non_contiguous_saved_as_contiguous_copy(self):
        base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
        state = {"t": base.t(), "slice": base[:, 1::2], "np": base.numpy()[::2]}
        self.store.save(state, 3)
        out = self.store.load(3)
        self.assertTrue(torch.equal(out["t"], base.t()))
        self.assertTrue(out["t"].is_contiguous())
        self.assertTrue(torch.equal(out["slice"], base[:, 1::2]))
        np.testing.assert_array_equal(out["np"], base.numpy()[::2])

    def test_lists_tuples_and_scalars(self):
        state = {"layers": [torch.ones(2), torch.zeros(3, dtype=torch.int32)],
                 "pair": (torch.full((2,), 5.0), np.ones(2)), "int": 3, "big": 2**70,
                 "float": 0.1, "inf": float("inf"), "bool": True, "none": None, "str": "héllo",
                 "bytes": b"\x00\xff", "npf": np.float32(1.5), "npi": np.int64(-4),
                 "size": torch.Size([2, 3]), "nested": {"a": [1, (2.5, "x")], 7: {}, None: 1}}
        self.store.save(state, 4)
        out = self.store.load()
        self.assertIsInstance(out["layers"], list)
        self.assertIsInstance(out["pair"], tuple)
        self.assertSame(out["layers"][1], state["layers"][1])
        self.assertSame(out["pair"][1], state["pair"][1])
        for k in ("int", "big", "float", "inf", "bool", "none", "str", "bytes", "nested", "size"):
            self.assertEqual(out[k], state[k], k)
            self.assertIs(type(out[k]), type(state[k]), k)
        self.assertIs(type(out["bool"]), bool)
        self.assertEqual(out["npf"], np.float32(1.5))
        self.assertIs(type(out["npf"]), np.float32)
        self.assertIs(type(out["npi"]), np.int64)

    def test_keys_with_dots_round_trip(self):
        # names join the keys with '.' as they are (tests/python/test_names.py has the rest)
        state = {"a.b": {"c.d%2E": torch.ones(1), "c": {"e%": torch.zeros(1)}},
                 "a": {"c": torch.full((1,), 2.0)}, 0: torch.full((1,), 3.0),
                 "": {"x": torch.ones(2)}}
        self.store.save(state, 5)
        names = [t["name"] for t in self.store.tensors(5)]
        self.assertEqual(names, ["a.b.c.d%2E", "a.b.c.e%", "a.c", "0", ".x"])
        out = self.store.load(5)
        self.assertEqual(list(out), list(state))
        self.assertEqual(out["a.b"]["c.d%2E"].item(), 1.0)
        self.assertEqual(out["a.b"]["c"]["e%"].item(), 0.0)
        self.assertEqual(out["a"]["c"].item(), 2.0)
        self.assertEqual(out[0].item(), 3.0)
        with self.assertRaisesRegex(ValueError, r"both be saved as the tensor '0': \[0\] and \['0'\]"):
            self.store.save({0: torch.ones(1), "0": torch.ones(1)}, 6)

    def test_model_and_optimizer(self):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
        opt = torch.optim.Adam(model.parameters(), lr=0.01, betas=(0.8, 0.95))
        for _ in range(3):
            opt.zero_grad()
            model(torch.randn(4, 8)).sum().backward()
            opt.step()
        state = {"model": model.state_dict(), "optim": opt.state_dict(), "step": 3, "lr": 0.01,
                 "name": "run-1", "done": False, "best": None,
                 "rng": {"torch": torch.get_rng_state(), "numpy": np.random.get_state()}}
        self.store.save(state, 3, metadata={"note": "hello", "epoch": 2})
        out = self.store.load()
        self.assertEqual(self.store.metadata(), {"note": "hello", "epoch": "2"})
        for k in ("step", "lr", "name", "done", "best"):
            self.assertEqual(out[k], state[k])
            self.assertIs(type(out[k]), type(state[k]))
        self.assertEqual(out["optim"]["param_groups"], opt.state_dict()["param_groups"])
        self.assertEqual(set(out["optim"]["state"]), {0, 1, 2, 3})
        model2 = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
        opt2 = torch.optim.Adam(model2.parameters(), lr=0.5)
        model2.load_state_dict(out["model"])
        opt2.load_state_dict(out["optim"])
        for a, b in zip(model.parameters(), model2.parameters()):
            self.assertTrue(torch.equal(a, b))
        s1, s2 = opt.state_dict(), opt2.state_dict()
        self.assertEqual(s1["param_groups"], s2["param_groups"])
        for i in s1["state"]:
            for k in s1["state"][i]:
                self.assertTrue(torch.equal(torch.as_tensor(s1["state"][i][k]),
                                            torch.as_tensor(s2["state"][i][k])))
        np.random.set_state(out["rng"]["numpy"])
        torch.set_rng_state(out["rng"]["torch"])

    def test_unsupported_types(self):
        with self.assertRaisesRegex(TypeError, "unsupported type"):
            self.store.save({"x": object()}, 1)
        with self.assertRaisesRegex(TypeError, "complex"):
            self.store.save({"c": torch.zeros(2, dtype=torch.complex64)}, 1)
        with self.assertRaisesRegex(TypeError, "dict key"):
            self.store.save({(1, 2): torch.zeros(1)}, 1)
        self.assertEqual(self.store.list(), [])  # nothing began


class Incremental(Base):
    def test_only_changed_tensor_is_written(self):
        g = torch.Generator().manual_seed(2)
        state = {f"w{i}": torch.randn(MiB // 2, generator=g) for i in range(6)}  # 2 MiB each
        st1 = self.store.save(state, 10)
        self.assertEqual(st1.chunks_new, 12)
        self.assertGreaterEqual(st1.bytes_stored, 12 * MiB)
        state["w3"].add_(1.0)
        st2 = self.store.save(state, 20)
        self.assertEqual(st2.chunks, 12)
        self.assertEqual(st2.chunks_new, 2)
        self.assertEqual(st2.chunks_reused, 10)
        self.assertLessEqual(st2.bytes_stored, 2 * MiB + 64 * 1024)
        lst = self.store.list()
        self.assertEqual([i["step"] for i in lst], [10, 20])
        self.assertGreaterEqual(lst[0]["new_bytes"], 12 * MiB)
        self.assertGreaterEqual(lst[1]["new_bytes"], 2 * MiB)
        self.assertLess(lst[1]["new_bytes"], 3 * MiB)
        self.assertEqual(lst[1]["new_chunks"], 2)
        self.assertEqual(lst[1]["logical_bytes"], 12 * MiB)
        per = {t["name"]: t["chunks_new"] for t in self.store.tensors(20)}
        self.assertEqual(per, {f"w{i}": (2 if i == 3 else 0) for i in range(6)})
        self.assertTrue(torch.equal(self.store.load(20)["w3"], state["w3"]))
        self.assertFalse(torch.equal(self.store.load(10)["w3"], state["w3"]))
        self.assertEqual(self.store.verify(20), [])


class Async(Base):
    def test_mutation_after_snapshot_not_in_checkpoint(self):
        t = torch.arange(4 * MiB, dtype=torch.float32)  # 16 MiB
        a = np.arange(MiB, dtype=np.int64)
        ref_t, ref_a = t.clone(), a.copy()
        h = self.store.save_async({"t": t, "a": a}, 1)
        h.wait_snapshot()
        t.fill_(-1.0)  # at once: the save may still be hashing and writing
        a[:] = -1
        st = h.wait()
        self.assertEqual(st.step, 1)
        self.assertTrue(h.done())
        self.assertIs(h.wait(), st)  # a second wait returns the same statistics
        out = self.store.load(1)
        self.assertTrue(torch.equal(out["t"], ref_t))
        np.testing.assert_array_equal(out["a"], ref_a)

    def test_several_in_flight_and_close_waits(self):
        hs = [self.store.save_async({"x": torch.full((1000,), float(i))}, i) for i in range(1, 5)]
        for h in hs:
            h.wait_snapshot()
        self.store.close()
        self.assertTrue(all(h.done() for h in hs))
        self.store = libckpt.Store(self.path)
        self.assertEqual(self.store.steps(), [1, 2, 3, 4])
        self.assertEqual(self.store.load(3)["x"][0].item(), 3.0)

    def test_non_contiguous_copy_kept_alive(self):
        base = torch.randn(512, 1024)
        h = self.store.save_async({"t": base.t()}, 1)
        del base  # the handle holds the contiguous copy
        h.wait()
        self.assertEqual(tuple(self.store.load()["t"].shape), (1024, 512))

    def test_sync_and_async_stats(self):
        st = self.store.save({"x": torch.ones(100)}, 1)
        self.assertIsInstance(st, libckpt.SaveStats)
        d = st.as_dict()
        self.assertEqual(d["tensors"], 1)
        self.assertIn(d["engine"], ("io_uring", "psync"))
        self.assertEqual(d["gpu"], "host")

    def test_reserve_pool_before_first_save(self):
        state = {"a": torch.arange(3 << 20, dtype=torch.float32), "b": torch.ones(5)}
        want = self.store.reserve(state)
        self.assertGreaterEqual(want, 12 << 20)
        st = self.store.save(state, 1)
        # the save used the reserved pool (state-sized), not the store's 32M default
        self.assertGreaterEqual(st.pool_bytes, 12 << 20)
        self.assertLessEqual(st.pool_bytes, want)
        self.assertEqual(self.store.reserve(), 0)  # a smaller request keeps the pool
        self.assertEqual(self.store.save(state, 2).pool_bytes, st.pool_bytes)
        with self.assertRaises(libckpt.CkptError):
            self.store.reserve(4096)

    def test_reserve_counts_shards(self):
        # a Shard (as a DTensor) counts its local tensor, as the save takes it: the pool holds
        # the state and the snapshot never waits for the disk
        state = {"w": libckpt.Shard(torch.ones(3 << 20), global_shape=(6 << 20,), offset=(0,))}
        self.assertGreaterEqual(self.store.reserve(state), 12 << 20)


class Restore(Base):
    def make(self):
        torch.manual_seed(3)
        return {"w": torch.randn(4, 5), "b": torch.randn(5).bfloat16(), "n": np.arange(6.0),
                "opt": {"state": {0: {"step": torch.tensor(4.0), "m": torch.randn(4, 5)}},
                        "lr": 0.5, "betas": (0.9, 0.99)}, "step": 7}

    def test_restore_in_place(self):
        saved = self.make()
        self.store.save(saved, 7)
        target = {"w": torch.zeros(4, 5), "b": torch.zeros(5, dtype=torch.bfloat16),
                  "n": np.zeros(6), "opt": {"state": {0: {"step": torch.tensor(0.0),
                                                          "m": torch.zeros(5, 4).t()}},
                                            "lr": 0.1, "betas": (0.0, 0.0)}, "step": 0}
        ids = (id(target["w"]), target["w"].data_ptr(), id(target["n"]))
        m_ptr = target["opt"]["state"][0]["m"].data_ptr()
        self.assertEqual(self.store.restore(target), 7)
        self.assertEqual((id(target["w"]), target["w"].data_ptr(), id(target["n"])), ids)
        self.assertTrue(torch.equal(target["w"], saved["w"]))
        self.assertTrue(torch.equal(target["b"], saved["b"]))
        np.testing.assert_array_equal(target["n"], saved["n"])
        m = target["opt"]["state"][0]["m"]
        self.assertEqual(m.data_ptr(), m_ptr)  # non-contiguous target: filled through a copy
        self.assertTrue(torch.equal(m, saved["opt"]["state"][0]["m"]))
        self.assertEqual(target["opt"]["state"][0]["step"].item(), 4.0)
        self.assertEqual(target["step"], 7)
        self.assertEqual(target["opt"]["lr"], 0.5)
        self.assertEqual(target["opt"]["betas"], (0.9, 0.99))

    def test_restore_module_parameters(self):
        m1, m2 = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
        self.store.save(m1.state_dict(), 1)
        self.store.restore(m2.state_dict())  # state_dict tensors share the parameters' storage
        self.assertTrue(torch.equal(m1.weight, m2.weight))
        self.assertTrue(torch.equal(m1.bias, m2.bias))

    def test_load_gives_new_tensors(self):
        saved = self.make()
        self.store.save(saved, 7)
        out = self.store.load()
        self.assertIsNot(out["w"], saved["w"])
        self.assertNotEqual(out["w"].data_ptr(), saved["w"].data_ptr())
        self.assertTrue(torch.equal(out["w"], saved["w"]))
        self.assertEqual(out["opt"]["state"][0]["step"].item(), 4.0)
        self.assertEqual(out["step"], 7)

    def test_mismatch_errors(self):
        self.store.save(self.make(), 7)
        t = self.make()
        t["w"] = torch.full((5, 4), 9.0)
        with self.assertRaisesRegex(libckpt.MismatchError, r"'w': shape mismatch: checkpoint 7 has "
                                    r"F32 \[4, 5\], the target is torch.float32 \[5, 4\]"):
            self.store.restore(t)
        self.assertTrue(torch.all(t["w"] == 9.0))  # nothing written
        t = self.make()
        t["b"] = torch.zeros(5, dtype=torch.float16)
        with self.assertRaisesRegex(libckpt.MismatchError, "'b': dtype mismatch.*BF16.*float16"):
            self.store.restore(t)
        t = self.make()
        t["n"] = np.zeros(6, np.float32)
        with self.assertRaisesRegex(libckpt.MismatchError, "'n': dtype mismatch"):
            self.store.restore(t)
        t = self.make()
        t["n"].flags.writeable = False
        with self.assertRaisesRegex(libckpt.MismatchError, "read-only"):
            self.store.restore(t)
        t = self.make()
        del t["w"]
        with self.assertRaisesRegex(libckpt.MismatchError, "lacks: w"):
            self.store.restore(t)
        self.store.restore(t, strict=False)
        t = self.make()
        t["extra"] = torch.zeros(1)
        with self.assertRaisesRegex(libckpt.NotFoundError, "'extra'"):
            self.store.restore(t)
        t = self.make()
        t["opt"]["betas"] = (0.1, 0.2, 0.3)
        with self.assertRaisesRegex(libckpt.MismatchError, "3 items"):
            self.store.restore(t)
        self.assertIsInstance(libckpt.MismatchError("x"), ValueError)


class Errors(Base):
    def test_create_makes_parents(self):
        # as DCP's FileSystemWriter: the directories above a new store are made too
        deep = os.path.join(self.dir, "runs", "exp-1", "ckpt")
        with libckpt.Store(deep, create=True) as s:
            s.save({"x": torch.ones(2)}, 1)
        self.assertTrue(os.path.isfile(os.path.join(deep, "store")))
        with self.assertRaises(libckpt.NotFoundError):  # without create: nothing is made
            libckpt.Store(os.path.join(self.dir, "other", "ckpt"))
        self.assertFalse(os.path.exists(os.path.join(self.dir, "other")))
        open(os.path.join(self.dir, "afile"), "w").close()
        with self.assertRaisesRegex(libckpt.InvalidArgumentError, "afile"):
            libckpt.Store(os.path.join(self.dir, "afile", "sub", "ckpt"), create=True)

    def test_missing_step(self):
        with self.assertRaises(libckpt.NotFoundError) as cm:
            self.store.load()
        self.assertEqual(cm.exception.code, 10)
        self.assertIsNone(self.store.latest_step())
        self.store.save({"x": torch.ones(1)}, 5)
        self.assertEqual(self.store.latest_step(), 5)
        with self.assertRaisesRegex(libckpt.NotFoundError, "checkpoint 6"):
            self.store.load(6)
        with self.assertRaises(libckpt.NotFoundError):
            self.store.restore({"x": torch.ones(1)}, step=4)
        with self.assertRaises(LookupError):
            self.store.metadata(4)

    def test_existing_step(self):
        self.store.save({"x": torch.ones(1)}, 5)
        with self.assertRaises(libckpt.ExistsError) as cm:
            self.store.save({"x": torch.ones(1)}, 5)
        self.assertTrue(str(cm.exception))
        with libckpt.Store(self.path, overwrite=True) as s2:
            s2.save({"x": torch.zeros(1)}, 5)
        self.assertEqual(self.store.load(5)["x"].item(), 0.0)

    def test_busy_store(self):
        # Another handle (the lock is a flock: another process, or another handle here) holds the
        # writer lock while its save is open.
        other = libckpt.Store(self.path)
        lib = L.load()
        sv = ctypes.c_void_p()
        self.assertEqual(lib.ckpt_save_begin(other._ptr, 1, ctypes.byref(sv)), 0)
        try:
            with self.assertRaises(libckpt.BusyError) as cm:
                self.store.save({"x": torch.ones(1)}, 2)
            self.assertEqual(cm.exception.code, 8)
            self.assertIsInstance(cm.exception, libckpt.CkptError)
            self.assertGreater(len(str(cm.exception)), 20)
        finally:
            lib.ckpt_save_abort(sv)
            other.close()
        self.store.save({"x": torch.ones(1)}, 2)  # free again

    def test_busy_store_other_process(self):
        code = ("import sys, ctypes; sys.path.insert(0, 'python'); import libckpt\n"
                "from libckpt import _lib as L\n"
                "s = libckpt.Store(sys.argv[1]); sv = ctypes.c_void_p()\n"
                "assert L.load().ckpt_save_begin(s._ptr, 100, ctypes.byref(sv)) == 0\n"
                "print('locked', flush=True); sys.stdin.read()\n"
                "L.load().ckpt_save_abort(sv); s.close()\n")
        p = subprocess.Popen([sys.executable, "-c", code, self.path], cwd=ROOT, text=True,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        try:
            self.assertEqual(p.stdout.readline().strip(), "locked")
            h = None
            with self.assertRaisesRegex(libckpt.BusyError, "busy"):
                h = self.store.save_async({"x": torch.ones(1)}, 3)
            self.assertIsNone(h)
            self.assertEqual(self.store.list(), [])  # reading needs no lock
        finally:
            p.stdin.close()
            p.wait(timeout=30)
            p.stdout.close()
        self.store.save({"x": torch.ones(1)}, 3)

    def test_open_errors(self):
        missing = os.path.join(self.dir, "nope")
        with self.assertRaisesRegex(libckpt.NotFoundError, "nope"):
            libckpt.Store(missing, create=False)
        with self.assertRaisesRegex(libckpt.NotFoundError, "nope"):
            libckpt.Store(missing, read_only=True)
        with self.assertRaises(libckpt.InvalidArgumentError) as cm:
            libckpt.Store(self.path, chunk_size=1000)
        self.assertIn("chunk_size", str(cm.exception))
        with self.assertRaises(ValueError):
            libckpt.Store(self.path, compress="lz4")
        ro = libckpt.Store(self.path, read_only=True)
        with self.assertRaises(libckpt.CkptError) as cm:
            ro.save({"x": torch.ones(1)}, 1)
        self.assertIsInstance(cm.exception, libckpt.PermissionDeniedError)
        ro.close()

    def test_options_and_context_manager(self):
        p = os.path.join(self.dir, "z")
        with libckpt.Store(p, create=True, compress="zstd", zstd_level=3, chunk_size="256K", threads=1,
                           queue_depth=4, io_engine="psync", direct_io=False,
                           data_dirs=[os.path.join(self.dir, "d1")]) as s:
            st = s.save({"z": torch.zeros(MiB)}, 1)  # 4 MiB of zeros compress well
            self.assertEqual(st.engine, "psync")
            self.assertEqual(st.chunks, 16)
            self.assertLess(st.bytes_stored, MiB)
            self.assertEqual(st.data_dirs, 2)
        with self.assertRaisesRegex(ValueError, "closed"):
            s.list()
        with libckpt.Store(p) as s:
            self.assertTrue(torch.equal(s.load()["z"], torch.zeros(MiB)))

    def test_library_not_found_message(self):
        env = dict(os.environ, CKPT_LIBRARY="/nonexistent/libckpt.so.0")
        code = ("import sys; sys.path.insert(0, 'python'); import libckpt\n"
                "try:\n libckpt.Store('/tmp/x')\nexcept libckpt.LibraryNotFoundError as e:\n"
                " print(e)\n")
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=60)
        self.assertIn("cannot find or load libckpt.so", out.stdout)
        self.assertIn("/nonexistent/libckpt.so.0 ($CKPT_LIBRARY)", out.stdout)
        self.assertIn("CKPT_LIBRARY", out.stdout)


@unittest.skipUnless(L.has("ckpt_store_prune"), "this libckpt has no prune/gc")
class Retention(Base):
    def test_prune_gc_du(self):
        for i in range(1, 6):
            self.store.save({"a": torch.full((MiB // 4,), float(i)), "b": torch.zeros(MiB // 4)}, i * 10)
        du = self.store.du()
        self.assertEqual([c["step"] for c in du["checkpoints"]], [10, 20, 30, 40, 50])
        self.assertGreater(du["checkpoints"][0]["shared_bytes"], 0)  # 'b' is shared
        rep = self.store.prune(keep_last=2, keep_every=20, dry_run=True)
        self.assertEqual(rep["steps_removed"], [10, 30])
        self.assertEqual(self.store.steps(), [10, 20, 30, 40, 50])
        h = self.store.save_async({"a": torch.ones(1)}, 60)
        with self.assertRaises(libckpt.BusyError):  # a save in flight holds the lock
            self.store.prune(keep_last=1)
        h.wait()
        rep = self.store.prune(keep_last=2, keep_every=20, keep_steps=[30])
        self.assertEqual(rep["steps_removed"], [10])
        self.assertEqual(self.store.steps(), [20, 30, 40, 50, 60])
        self.assertIsInstance(self.store.gc(compact_below=0.9)["bytes_freed"], int)
        self.assertEqual(self.store.load(20)["a"][0].item(), 2.0)
        self.assertEqual(self.store.verify(20), [])


@unittest.skipUnless(L.has("ckpt_save_add_tag"), "this libckpt has no tags")
class Tags(Base):
    """Tags from Python: save(tags=), listings, prune(keep_tags=), CheckpointManager."""

    def test_save_list_info(self):
        self.store.save({"a": torch.ones(4)}, 1, tags=["best", "epoch-1"])
        self.store.save_async({"a": torch.ones(4)}, 2, tags="nightly").wait()
        self.store.save({"a": torch.ones(4)}, 3)
        self.assertEqual([i["tags"] for i in self.store.list()],
                         [["best", "epoch-1"], ["nightly"], []])
        self.assertEqual(self.store.info(1)["tags"], ["best", "epoch-1"])
        self.assertEqual(self.store.info()["tags"], [])
        self.assertNotIn("ckpt.tags", self.store.metadata(1))  # reserved: not user metadata
        out = subprocess.run([os.path.join(ROOT, os.environ.get("B", "build"), "bin", "ckptctl"),
                              "list", "--tag", "best", self.path], capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stderr)
        rows = [ln.split()[0] for ln in out.stdout.splitlines()[1:] if ln and ln[0].isdigit()]
        self.assertEqual(rows, ["1"], out.stdout)

    def test_bad_tags_save_nothing(self):
        for bad, why in ((["has space"], "space"), (["a,b"], "','"), ([""], "empty"),
                         (["x" * 65], "64"), ([7], "str")):
            with self.assertRaises((libckpt.InvalidArgumentError, TypeError), msg=bad) as cm:
                self.store.save({"a": torch.ones(4)}, 5, tags=bad)
            self.assertIn(why, str(cm.exception), bad)
        self.assertEqual(self.store.steps(), [])
        self.store.save({"a": torch.ones(4)}, 5, tags=["ok"])  # nothing was left half-begun
        self.assertEqual(self.store.info(5)["tags"], ["ok"])

    def test_reader_lease_names_reader(self):
        """A reader of the binding takes a lease (STORE/leases/) with its record: pid, what it
        reads, its node, so that gc on another node keeps its packs (docs/format.md)."""
        self.store.save({"a": torch.ones(4)}, 3)
        with self.store._open_checkpoint(3) as _:
            ld = os.path.join(self.path, "leases")
            names = [n for n in os.listdir(ld) if n.endswith(".lease")]
            self.assertEqual(len(names), 1)
            with open(os.path.join(ld, names[0])) as f:
                text = f.read()
            self.assertIn(f"\npid {os.getpid()}\n", text)
            self.assertIn("\nwhat reader of step 3\n", text)
            self.assertIn("\nnode ", text)
        self.assertEqual([n for n in os.listdir(ld) if n.endswith(".lease")], [])

    def test_prune_keep_tags(self):
        for i in range(1, 6):
            self.store.save({"a": torch.full((1024,), float(i))}, i,
                            tags=["release"] if i == 2 else None)
        rep = self.store.prune(keep_last=1, keep_tags=["release"], dry_run=True)
        self.assertEqual(rep["steps_removed"], [1, 3, 4])
        # the time rules reach libckpt: all five were saved in the last hour (keep_daily and the
        # other calendar rules are tested in C, where the clock can be set: here a save could
        # straddle midnight)
        self.assertEqual(self.store.prune(keep_within=3600, dry_run=True)["steps_removed"], [])
        rep = self.store.prune(keep_last=1, keep_tags="release")
        self.assertEqual(self.store.steps(), [2, 5])
        self.assertEqual(self.store.load(2)["a"][0].item(), 2.0)
        with self.assertRaises(libckpt.InvalidArgumentError):
            self.store.prune(keep_tags=["bad tag"])
        with self.assertRaises(libckpt.InvalidArgumentError):
            self.store.prune(keep_daily=-1)
        self.assertEqual(self.store.steps(), [2, 5])

    def test_manager_pending_step(self):
        # all_steps lists durable checkpoints only: the save in flight is pending_step until then
        self.store.close()
        with libckpt.CheckpointManager(self.path, pool_size="32M") as m:
            self.assertIsNone(m.pending_step)
            m.save(1, {"a": torch.ones(1 << 20)})
            m.save(2, {"a": torch.zeros(1 << 20)})  # waits for step 1 first
            pending = m.pending_step  # first: a save it no longer names is durable, listed
            steps = m.all_steps()
            self.assertIn(1, steps)
            # step 2 was in flight (pending_step names it) or is listed: never neither
            self.assertTrue(pending == 2 or 2 in steps, (steps, pending))
            if pending == 2 and 2 not in steps:
                print("(step 2 was still in flight: all_steps left it out)")
            m.wait_until_finished()
            self.assertIsNone(m.pending_step)
            self.assertEqual(m.all_steps(), [1, 2])
        self.store = libckpt.Store(self.path)

    def test_manager_tags(self):
        self.store.close()
        with libckpt.CheckpointManager(self.path, max_to_keep=2, keep_tags=["keep"],
                                       pool_size="32M") as m:
            for step in range(1, 7):
                m.save(step, {"a": torch.full((256,), float(step))},
                       tags=["keep"] if step == 2 else ["run-a"])
            m.wait_until_finished()
            self.assertEqual(m.all_steps(), [2, 5, 6])
            with self.assertRaises(libckpt.InvalidArgumentError):
                m.save(7, {"a": torch.ones(1)}, tags=["no space"])
            self.assertEqual(m.store.info(5)["tags"], ["run-a"])
        self.store = libckpt.Store(self.path)


class OneWriter(Base):
    """A second CheckpointManager on a store: refused with a BusyError naming the
    first writer, or waiting for it with lock_wait.  The first writer is another process holding
    a save open until told to commit (pipes, no sleeps)."""

    HOLD = ("import sys, ctypes; sys.path.insert(0, 'python'); import libckpt, numpy as np\n"
            "s = libckpt.Store(sys.argv[1]); h = s.save_async({'x': np.ones(4, np.float32)}, 1)\n"
            "print('locked', flush=True); sys.stdin.readline(); h.wait(); s.close()\n")

    def setUp(self):
        super().setUp()
        self.store.close()  # the holder's save must commit: it locks as soon as it begins
        self.holder = subprocess.Popen([sys.executable, "-c", self.HOLD, self.path], cwd=ROOT,
                                       text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.assertEqual(self.holder.stdout.readline().strip(), "locked")

    def release(self):
        if self.holder.poll() is None:
            self.holder.stdin.write("\n")
            self.holder.stdin.flush()
        self.assertEqual(self.holder.wait(timeout=60), 0)

    def tearDown(self):
        self.release()
        self.holder.stdin.close()
        self.holder.stdout.close()
        self.store = libckpt.Store(self.path)
        super().tearDown()

    def test_refused_names_the_writer(self):
        import socket
        with libckpt.CheckpointManager(self.path) as m:
            with self.assertRaises(libckpt.BusyError) as cm:
                m.save(2, {"x": torch.ones(4)})
        msg = str(cm.exception)
        self.assertIn(f"is busy: process {self.holder.pid} on host {socket.gethostname()} "
                      "(save since ", msg)
        self.assertRegex(msg, r"since \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\) is writing to it")

    def test_wait_expires(self):
        with libckpt.CheckpointManager(self.path, lock_wait=0.05) as m:
            with self.assertRaisesRegex(libckpt.BusyError, "still after waiting 0.05 s"):
                m.save(2, {"x": torch.ones(4)})

    def test_wait_then_save(self):
        with libckpt.CheckpointManager(self.path, lock_wait=600, async_save=False) as m:
            out = {}
            t = threading.Thread(target=lambda: out.update(ok=m.save(2, {"x": torch.ones(4)})))
            t.start()
            self.release()
            t.join(timeout=600)
            self.assertTrue(out.get("ok"))
            self.assertEqual(m.all_steps(), [1, 2])

    def test_bad_lock_wait(self):
        for bad in (-1, True, "1"):
            with self.assertRaises((ValueError, TypeError)):
                libckpt.Store(self.path, lock_wait=bad)


@unittest.skipUnless(L.has("ckpt_store_prune"), "this libckpt has no prune/gc")
class LatestOpenedOnce(Base):
    """load('latest') and restore('latest') resolve and open the checkpoint in one C open: a
    keep-newest prune run right after that open (through the binding's own calls, not a timed
    race) must not make them fail.  Opened again by the step it resolved to, the
    checkpoint would be gone: a reader keeps its packs, not its manifest."""

    MKDIST = os.path.join(ROOT, "build", "tests", "bin", "mkdist")

    def _with_prune_after_first_open(self, op, save):
        """Runs op() with every reader open of the binding counted and the first one followed
        by save(3) and a prune keeping the newest only; returns (op's result, opens, resolves)."""
        lib = L.load()
        calls = {"open": [], "resolve": 0}
        pruner = libckpt.Store(self.path)

        def counted(name):
            real = getattr(lib, name)

            def f(store, step, out):
                rc = real(store, step, out)
                calls["open"].append((name, step))
                if len(calls["open"]) == 1 and rc == 0:
                    save(3)
                    pruner.prune(keep_last=1)
                return rc
            return f

        def resolve(*a):
            calls["resolve"] += 1
            return real_resolve(*a)

        real_resolve = lib.ckpt_store_resolve
        names = ["ckpt_reader_open"] + (["ckpt_dist_reader_open"] if L.has("ckpt_dist_reader_open") else [])
        patches = [mock.patch.object(lib, n, counted(n)) for n in names]
        patches.append(mock.patch.object(lib, "ckpt_store_resolve", resolve))
        try:
            for p in patches:
                p.start()
            out = op()
        finally:
            for p in reversed(patches):
                p.stop()
            pruner.close()
        self.assertEqual(self.store.steps(), [3])  # the prune did run
        return out, calls["open"], calls["resolve"]

    def _save_single(self, step):
        with libckpt.Store(self.path) as st:
            st.save({"a": torch.full((1000,), float(step))}, step)

    def _save_multi(self, step):
        subprocess.run([self.MKDIST, self.path, str(step), "2", "--gen", str(step)], check=True,
                       capture_output=True, timeout=60)

    def test_load_latest_single(self):
        for i in (1, 2):
            self._save_single(i)
        out, opens, resolves = self._with_prune_after_first_open(lambda: self.store.load(), self._save_single)
        self.assertTrue(torch.all(out["a"] == 2.0))
        self.assertEqual(len(opens), 1, opens)
        self.assertEqual(opens[0][1], L.STEP_LATEST)
        self.assertEqual(resolves, 0)

    def test_restore_latest_single(self):
        for i in (1, 2):
            self._save_single(i)
        a = torch.zeros(1000)
        res, opens, resolves = self._with_prune_after_first_open(
            lambda: self.store.restore({"a": a}), self._save_single)
        self.assertEqual(res, 2)
        self.assertTrue(torch.all(a == 2.0))
        self.assertEqual((len(opens), resolves), (1, 0), opens)

    def test_manager_restore_latest(self):
        for i in (1, 2):
            self._save_single(i)
        a = torch.zeros(1000)
        with libckpt.CheckpointManager(self.path) as m:
            res, opens, _ = self._with_prune_after_first_open(lambda: m.restore({"a": a}),
                                                              self._save_single)
        self.assertEqual((res, len(opens)), (2, 1), opens)
        self.assertTrue(torch.all(a == 2.0))

    @unittest.skipUnless(os.path.exists(MKDIST), "build/tests/bin/mkdist not built")
    def test_load_latest_multi_rank(self):
        for i in (1, 2):
            self._save_multi(i)
        want = self.store.load(2, keys="w")  # mkdist's "w" (f32); "emb" is u16, unknown to older torch
        out, opens, resolves = self._with_prune_after_first_open(lambda: self.store.load(keys="w"),
                                                                 self._save_multi)
        self.assertEqual(sorted(out), sorted(want))
        for k in want:
            self.assertSame(out[k], want[k], k)
        self.assertEqual((len(opens), resolves), (1, 0), opens)


@unittest.skipUnless(torch.cuda.is_available(), "no CUDA device")
class Cuda(Base):
    def test_cuda_async_ordered_and_fenced(self):
        dev = torch.device("cuda")
        x = torch.zeros(8 * MiB, device=dev)
        x.add_(1.0)  # queued before the save: must be in the snapshot
        b = torch.randn(1000, device=dev).bfloat16()
        h = self.store.save_async({"x": x, "b": b, "t": x.view(2048, -1).t()}, 1)
        x.add_(1.0)  # queued after the fence: runs after the copy
        h.wait()
        out = self.store.load()
        self.assertTrue(torch.all(out["x"] == 1.0))
        self.assertTrue(torch.equal(out["b"], b.cpu()))
        torch.cuda.synchronize()
        self.assertTrue(torch.all(x == 2.0))
        y = torch.zeros(8 * MiB, device=dev)
        self.store.restore({"x": y, "b": torch.empty_like(b), "t": torch.empty(2048, 4096, device=dev).t()})
        self.assertTrue(torch.all(y == 1.0))
        z = self.store.load(device="cuda")
        self.assertEqual(z["x"].device.type, "cuda")


class Boxes(Base):
    """libckpt.Shard leaves without torch.distributed, and the multi-rank plan (the 4-process
    tests are tests/python/test_dist.py)."""

    def test_shard_checks(self):
        with self.assertRaisesRegex(ValueError, "outside the global extent"):
            libckpt.Shard(torch.zeros(2, 3), global_shape=(4, 3), offset=(3, 0))
        with self.assertRaisesRegex(ValueError, "2-d global_shape"):
            libckpt.Shard(torch.zeros(2, 3), global_shape=(4,), offset=(0,))
        with self.assertRaises(TypeError):
            libckpt.Shard([1, 2], global_shape=(2,), offset=(0,))

    def test_restore_shards_of_a_single_process_checkpoint(self):
        w = torch.arange(48.0).reshape(6, 8)
        self.store.save({"w": w, "n": 3}, 1)
        rows = libckpt.Shard(torch.zeros(2, 8), global_shape=(6, 8), offset=(2, 0))
        cols = libckpt.Shard(torch.zeros(5, 6).t(), global_shape=(6, 8), offset=(0, 3))
        st = {"w": rows, "n": None}
        self.assertEqual(self.store.restore(st, 1), 1)
        self.assertTrue(torch.equal(rows.tensor, w[2:4]))
        self.assertEqual(st["n"], 3)
        self.store.restore({"w": cols, "n": None}, 1)
        self.assertTrue(torch.equal(cols.tensor, w[:, 3:8]))
        arr = libckpt.Shard(np.zeros((1, 8), np.float32), global_shape=(6, 8), offset=(5, 0))
        self.store.restore({"w": arr, "n": None}, 1)
        self.assertTrue(np.array_equal(arr.tensor, w[5:].numpy()))
        bad = libckpt.Shard(torch.zeros(2, 8), global_shape=(7, 8), offset=(0, 0))
        with self.assertRaisesRegex(libckpt.MismatchError, "global shape mismatch"):
            self.store.restore({"w": bad, "n": None}, 1)
        bad = libckpt.Shard(torch.zeros(2, 8, dtype=torch.float64), global_shape=(6, 8), offset=(0, 0))
        with self.assertRaisesRegex(libckpt.MismatchError, "dtype mismatch"):
            self.store.restore({"w": bad, "n": None}, 1)

    def test_plan(self):
        from libckpt import _dsave
        F32, F64 = L.F32, L.F64
        sh = lambda name, off, shape, g: (name, "S", F32, shape, g, off)  # noqa: E731
        whole = lambda name, shape, dt=F32: (name, "T", dt, shape, None, None)  # noqa: E731
        ranks = [[sh("w", (0, 0), (2, 4), (4, 4)), whole("b", (3,)), whole("r0", (1,)),
                  sh("h", (0,), (2,), (4,)), sh("rep", (0,), (5,), (5,))],
                 [sh("w", (2, 0), (2, 4), (4, 4)), whole("b", (3,)),
                  sh("h", (0,), (2,), (4,)), sh("rep", (0,), (5,), (5,))],
                 [whole("b", (3,)), sh("h", (2,), (2,), (4,)), sh("rep", (0,), (5,), (5,))]]
        g = [(1, e, {}) for e in ranks]
        self.assertEqual(_dsave.plan(0, g), {"w": ("S", 0, 1), "b": ("R", 0, 3),
                                             "r0": ("R", 0, 1), "h": ("S", 0, 2),
                                             "rep": ("R", 0, 3)})
        # rank 1 holds the same box of h as rank 0: saved once, half by each
        self.assertEqual(_dsave.plan(1, g), {"w": ("S", 0, 1), "b": ("R", 1, 3),
                                             "h": ("S", 1, 2), "rep": ("R", 1, 3)})
        self.assertEqual(_dsave.plan(2, g), {"b": ("R", 2, 3), "h": ("S", 0, 1),
                                             "rep": ("R", 2, 3)})
        bad = [[whole("b", (3,))], [sh("b", (0,), (3,), (3,))]]
        with self.assertRaisesRegex(ValueError, "a Shard on rank.s. 1 but a whole tensor on rank.s. 0"):
            _dsave.plan(0, [(1, e, {}) for e in bad])
        bad = [[whole("b", (3,))], [whole("b", (3,), F64)]]
        with self.assertRaisesRegex(libckpt.MismatchError, "rank 1: F64"):
            _dsave.plan(0, [(1, e, {}) for e in bad])
        bad = [[whole("b", (3,))], [whole("b", (4,))]]
        with self.assertRaisesRegex(libckpt.MismatchError, "different shapes"):
            _dsave.plan(1, [(1, e, {}) for e in bad])

    def test_merged_structure(self):
        from libckpt import _dsave, _tree as T
        trees = [T.flatten({"a": torch.zeros(1), "v": 1, "d": {"x": 1}})[0],
                 T.flatten({"a": torch.zeros(1), "v": 2, "only1": torch.zeros(2), "d": {"y": 2}})[0]]
        m = T.build(_dsave.merge_trees(trees), lambda kind, name, loc: name)
        self.assertEqual(m, {"a": "a", "v": 1, "d": {"x": 1, "y": 2}, "only1": "only1"})

    def test_dtensor_message(self):
        if libckpt.dtensor_module() is not None:
            self.skipTest("this torch has DTensor (tests/python/test_dtensor.py runs it)")
        with self.assertRaisesRegex(libckpt.UnsupportedError,
                                    f"DTensor is not available in torch {torch.__version__}"):
            libckpt.Shard.from_dtensor(torch.zeros(1))


if __name__ == "__main__":
    torch.set_num_threads(2)
    unittest.main(verbosity=2)
