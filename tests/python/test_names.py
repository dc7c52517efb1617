#!/usr/bin/env python3
"""Tensor names as PyTorch writes them: a state_dict key is a dotted path.

- A module's state_dict under "model" gives the names "model.fc1.weight", exactly DCP's FQNs, in
  Store.tensors(); load(keys=) takes any dotted prefix, matched on whole components
  ("model.fc1" is not "model.fc10", "model.blocks.0" is one block of a flat state_dict);
  get_slice takes the dotted name.
- A round trip gives back exactly the keys saved: flat dotted keys stay flat, nested dicts
  nested.  Two entries that would get one name are a ValueError naming both, and nothing is saved.
- A store that the binding of ee43f25 wrote (data/oldnames-store.tar.gz, made by mk_oldnames.py:
  "model.fc1%2Eweight") still reads: the same names shown as dotted, load(keys=) and get_slice by
  dotted name, an ambiguous old pair refused naming both, a new save on top of it.
- get_slice of a sharded global tensor of a 2-rank checkpoint (gloo; skipped without it).

Run: /usr/bin/python3 tests/python/test_names.py (tests/python/t-python-names.sh).
"""

import collections
import datetime
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import unittest

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, HERE)
import libckpt  # noqa: E402
import mk_oldnames  # noqa: E402


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(3, 4)
        self.fc10 = torch.nn.Linear(4, 2)
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.LayerNorm(2)) for _ in range(3))


def same(test, a, b, where=""):
    """Equal structure, key types, container types and tensor bytes."""
    test.assertIs(type(a), type(b), where)
    if isinstance(a, torch.Tensor):
        test.assertEqual(a.dtype, b.dtype, where)
        test.assertTrue(torch.equal(a, b), where)
    elif isinstance(a, dict):
        test.assertEqual(list(a), list(b), where)
        for k in a:
            same(test, a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        test.assertEqual(len(a), len(b), where)
        for i, (x, y) in enumerate(zip(a, b)):
            same(test, x, y, f"{where}[{i}]")
    else:
        test.assertEqual(a, b, where)


class Base(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="libckpt-names-")
        self.path = os.path.join(self.dir, "store")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def store(self, **kw):
        return libckpt.Store(self.path, create=True, pool_size="8M", threads=2, **kw)


class DottedNames(Base):
    def setUp(self):
        super().setUp()
        torch.manual_seed(0)
        self.net = Net()
        self.sd = self.net.state_dict()
        self.state = {"model": self.sd, "step": 3}
        with self.store() as st:
            st.save(self.state, 1)

    def test_tensors_are_state_dict_fqns(self):
        with self.store() as st:
            names = [t["name"] for t in st.tensors(1)]
        self.assertEqual(names, ["model." + k for k in self.sd])
        self.assertIn("model.fc1.weight", names)
        self.assertIn("model.blocks.0.1.bias", names)

    def test_load_prefix_whole_components(self):
        with self.store() as st:
            fc1 = st.load(1, keys=["model.fc1"])
            blk = st.load(1, keys="model.blocks.0")
            one = st.load(1, keys="model.blocks.2.0.weight")
            with self.assertRaisesRegex(libckpt.NotFoundError, "model.fc"):
                st.load(1, keys="model.fc")  # not a component: fc1 and fc10 are not under it
            with self.assertRaises(libckpt.NotFoundError):
                st.load(1, keys="model.blocks.0.attn")
        self.assertEqual(list(fc1), ["model"])
        self.assertEqual(list(fc1["model"]), ["fc1.weight", "fc1.bias"])  # not fc10
        self.assertIsInstance(fc1["model"], collections.OrderedDict)
        self.assertTrue(torch.equal(fc1["model"]["fc1.weight"], self.sd["fc1.weight"]))
        self.assertEqual(list(blk["model"]), [k for k in self.sd if k.startswith("blocks.0.")])
        self.assertEqual(list(one["model"]), ["blocks.2.0.weight"])
        # a loaded block is what load_state_dict takes
        blk0 = Net().blocks[0]
        blk0.load_state_dict({k[len("blocks.0."):]: v for k, v in blk["model"].items()})
        self.assertTrue(torch.equal(blk0[0].weight, self.net.blocks[0][0].weight))

    def test_get_slice_by_dotted_name(self):
        with self.store() as st:
            sl = st.get_slice("model.fc1.weight", 1)
            self.assertEqual(sl.shape, (4, 3))
            self.assertTrue(torch.equal(sl[1:3], self.sd["fc1.weight"][1:3]))
            with self.assertRaises(libckpt.NotFoundError):
                st.get_slice("model.fc1%2Eweight", 1)  # a new store's names are not escaped

    def test_round_trip_keeps_keys_exactly(self):
        state = {"flat": {"fc1.weight": torch.ones(2), "fc1.bias": torch.zeros(1)},
                 "nested": {"fc1": {"weight": torch.full((2,), 2.0)}},
                 "odd": {"1.5": torch.ones(1), 2.5: torch.zeros(1), "a\0b": torch.ones(3),
                         "%2E": torch.ones(4)},
                 "list": [torch.ones(1), {"x.y": torch.zeros(2)}]}
        with self.store() as st:
            st.save(state, 2)
            out = st.load(2)
            names = sorted(t["name"] for t in st.tensors(2))
            meta = st.metadata(2)
        same(self, out, state)
        self.assertEqual(names, sorted(["flat.fc1.weight", "flat.fc1.bias", "nested.fc1.weight",
                                        "odd.1.5", "odd.2.5", "odd.a%00b", "odd.%2E",
                                        "list.0", "list.1.x.y"]))
        self.assertEqual(meta, {})  # the binding's own keys are not the user's metadata

    def test_collision_names_both_and_saves_nothing(self):
        with self.store() as st:
            for bad, a, b in (
                    ({"fc1": {"weight": torch.ones(1)}, "fc1.weight": torch.zeros(1)},
                     "['fc1']['weight']", "['fc1.weight']"),
                    ({0: torch.ones(1), "0": torch.ones(1)}, "[0]", "['0']"),
                    ({"m": [torch.ones(1), {"x": torch.ones(1)}], "m.1": {"x": torch.ones(1)}},
                     "['m'][1]['x']", "['m.1']['x']")):
                with self.assertRaises(ValueError) as cm:
                    st.save(bad, 5)
                msg = str(cm.exception)
                self.assertIn(a, msg)
                self.assertIn(b, msg)
            self.assertEqual(st.steps(), [1])
            # the same tensor under both spellings is one tensor, saved once: no clash
            t = torch.ones(2)
            st.save({"a": {"b": t}, "a.b": t}, 6)
            self.assertEqual([x["name"] for x in st.tensors(6)], ["a.b"])
            out = st.load(6)
            self.assertIs(out["a"]["b"], out["a.b"])

    def test_restore_module(self):
        fresh = Net()
        with self.store() as st:
            st.restore({"model": fresh, "step": 0}, 1)
        for k, v in fresh.state_dict().items():
            self.assertTrue(torch.equal(v, self.sd[k]), k)


def extract_old(dest):
    with tarfile.open(os.path.join(HERE, "data", "oldnames-store.tar.gz")) as tar:
        tar.extractall(dest)
    return os.path.join(dest, "store")


class OldEscapedStore(Base):
    """The store of data/oldnames-store.tar.gz: names "model.fc1%2Eweight", no libckpt.names."""

    def setUp(self):
        super().setUp()
        self.path = extract_old(self.dir)

    def test_fixture_is_old(self):
        with self.store() as st:
            with st._open_reader(1) as r:
                stored = [r.tensor(i)["name"] for i in range(r.count())]
                self.assertTrue(r.old_names())
        self.assertIn("model.fc1%2Eweight", stored)

    def test_names_shown_dotted(self):
        with self.store() as st:
            names = [t["name"] for t in st.tensors(2)]
        self.assertEqual(names, ["model.fc1.weight", "model.fc1.bias", "model.fc10.weight",
                                 "model.blocks.0.attn.weight", "model.blocks.1.attn.weight",
                                 "model.100%.scale", "optim.state.0.exp_avg", "x.y.z", "x.y.z"])

    def test_load_whole_and_by_prefix(self):
        with self.store() as st:
            for step in (1, 2):
                same(self, st.load(step), mk_oldnames.state(step), f"step {step}")
            fc1 = st.load(2, keys="model.fc1")
            blk = st.load(2, keys=["model.blocks.0", "step"])
            pct = st.load(2, keys="model.100%")
        want = mk_oldnames.state(2)["model"]
        self.assertEqual(list(fc1["model"]), ["fc1.weight", "fc1.bias"])
        self.assertTrue(torch.equal(fc1["model"]["fc1.bias"], want["fc1.bias"]))
        self.assertEqual(list(blk), ["model", "step"])
        self.assertEqual(list(blk["model"]), ["blocks.0.attn.weight"])
        self.assertEqual(list(pct["model"]), ["100%.scale"])

    def test_get_slice_dotted_and_stored(self):
        want = mk_oldnames.state(2)
        with self.store() as st:
            a = st.get_slice("model.blocks.1.attn.weight")
            self.assertTrue(torch.equal(a[2:5], want["model"]["blocks.1.attn.weight"][2:5]))
            b = st.get_slice("model.blocks%2E1%2Eattn%2Eweight")  # the name as stored
            self.assertTrue(torch.equal(b[:], want["model"]["blocks.1.attn.weight"]))
            self.assertTrue(torch.equal(st.get_slice("model.100%.scale")[...],
                                        want["model"]["100%.scale"]))
            with self.assertRaises(ValueError) as cm:
                st.get_slice("x.y.z")
            self.assertIn("'x%2Ey.z'", str(cm.exception))
            self.assertIn("'x.y%2Ez'", str(cm.exception))
            self.assertTrue(torch.equal(st.get_slice("x.y%2Ez")[:], want["x"]["y.z"]))

    def test_new_save_on_old_store(self):
        new = mk_oldnames.state(3)
        with self.store() as st:
            with self.assertRaisesRegex(ValueError, "'x.y.z'"):
                st.save(new, 3)  # the pair that two old names kept apart clashes now
            del new["x.y"]
            st.save(new, 3)
            self.assertIn("model.fc1.weight", [t["name"] for t in st.tensors(3)])
            same(self, st.load(3), new)
            same(self, st.load(1), mk_oldnames.state(1))
            with st._open_reader(3) as r:
                self.assertFalse(r.old_names())
            # the restore of an old checkpoint into a state of the same shape
            state = mk_oldnames.state(0)
            st.restore(state, 2)
            same(self, state, mk_oldnames.state(2))


# ---------------------------------------------------------------- a 2-rank checkpoint (gloo)
ROWS, COLS = 12, 5


def global_weight():
    return torch.arange(ROWS * COLS, dtype=torch.float32).reshape(ROWS, COLS) * 0.25


def rank_main(rank, world, init, path):
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method="file://" + init, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    rows = ROWS // world
    w = global_weight()[rank * rows:(rank + 1) * rows].clone()
    state = {"model": collections.OrderedDict([
        ("layers.0.weight", libckpt.Shard(w, (ROWS, COLS), (rank * rows, 0))),
        ("fc.bias", torch.arange(7, dtype=torch.float64))])}
    with libckpt.Store(path, create=True, pool_size="8M", threads=1) as st:
        st.save(state, 1)
    dist.barrier()
    dist.destroy_process_group()


class ShardedGlobal(Base):
    def test_get_slice_of_sharded_global(self):
        import torch.distributed as dist
        if not dist.is_available() or not dist.is_gloo_available():
            self.skipTest("torch.distributed without gloo")
        init = os.path.join(self.dir, "init")
        env = dict(os.environ, GLOO_SOCKET_IFNAME="lo")
        procs = [subprocess.Popen([sys.executable, __file__, "--rank", str(r), "2", init, self.path],
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True) for r in range(2)]
        try:
            outs = [p.communicate(timeout=180)[0] for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        for p, out in zip(procs, outs):
            self.assertEqual(p.returncode, 0, out)
        g = global_weight()
        with self.store() as st:
            with st._open_reader(1) as r:
                stored = [r.tensor(i)["name"] for i in range(r.count())]
            self.assertIn("model.layers.0.weight@1", stored)  # sharded: pieces NAME@RANK
            sl = st.get_slice("model.layers.0.weight", 1)
            self.assertEqual(sl.shape, (ROWS, COLS))
            self.assertTrue(torch.equal(sl[4:9], g[4:9]))  # across the two ranks' shards
            self.assertTrue(torch.equal(sl[-1], g[-1]))
            self.assertTrue(torch.equal(sl[:, 2:4], g[:, 2:4]))
            self.assertTrue(torch.equal(st.get_slice("model.fc.bias", 1)[2:5],
                                        torch.arange(7, dtype=torch.float64)[2:5]))
            part = st.load(1, keys="model.layers.0")
            self.assertEqual(list(part["model"]), ["layers.0.weight"])
            self.assertTrue(torch.equal(part["model"]["layers.0.weight"], g))
            with self.assertRaises(libckpt.NotFoundError):
                st.get_slice("model.layers.0", 1)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--rank":
        rank_main(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5])
        sys.exit(0)
    unittest.main(verbosity=1)
