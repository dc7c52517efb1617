"""The remote tier in Python: Store(path, remote=...) uploads in the background,
upload_state/wait_uploaded tell when a checkpoint is there, push/pull/remote_steps; the node-loss
drill (local store deleted, Store(new_path, remote=...) binds to the remote's store, pull, load
bit-identical); CheckpointManager(..., remote=...) on a replacement node restores the latest.

Run: /usr/bin/python3 tests/python/test_remote.py (tests/python/t-python-remote.sh). The remote is
$CKPT_TEST_REMOTE/NAME (s3://... once the S3 backend is in) or a temporary directory.
"""

import os
import shutil
import sys
import tempfile
import unittest
import uuid
import warnings

import torch

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))
import libckpt  # noqa: E402


def state(seed):
    g = torch.Generator().manual_seed(seed)
    return {"model": {"w": torch.randn(256, 1024, generator=g), "b": torch.randn(1024, generator=g)},
            "step": torch.tensor(seed)}


class Remote(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="libckpt-remote-py-")
        base = os.environ.get("CKPT_TEST_REMOTE")
        if base:
            self.url = f"{base}/py-{uuid.uuid4().hex}"
            path = self.url[7:] if self.url.startswith("file://") else self.url
            if path.startswith("/"):
                os.makedirs(path)
        else:
            self.url = os.path.join(self.dir, "remote")
            os.makedirs(self.url)

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def assertStateEqual(self, a, b):
        self.assertTrue(torch.equal(a["model"]["w"], b["model"]["w"]))
        self.assertTrue(torch.equal(a["model"]["b"], b["model"]["b"]))
        self.assertEqual(int(a["step"]), int(b["step"]))

    def test_drill(self):
        path = os.path.join(self.dir, "a")
        with libckpt.Store(path, create=True, remote=self.url) as s:
            self.assertEqual(s.remote, self.url)
            s.save(state(1), 1)
            s.save(state(2), 2)
            s.wait_uploaded(timeout=60)
            self.assertEqual(s.upload_state(1), "remote")
            self.assertEqual(s.upload_state(2), "remote")
            self.assertEqual(s.remote_steps(), [1, 2])
            st = s.push(2)
            self.assertEqual(st["packs_sent"], 0)
            self.assertGreater(st["packs_present"], 0)
        shutil.rmtree(path)  # the node is lost
        # the replacement node's path, its parents missing too (made as the store's own)
        path2 = os.path.join(self.dir, "new-node", "runs", "b")
        with libckpt.Store(path2, remote=self.url) as s:  # no create: bound to the remote's
            self.assertEqual(s.steps(), [])
            self.assertEqual(s.upload_state(2), "remote")
            self.assertEqual(s.pull(), 2)
            self.assertStateEqual(s.load(2), state(2))
            self.assertEqual(s.verify(2), [])

    def test_no_upload_and_errors(self):
        path = os.path.join(self.dir, "a")
        with libckpt.Store(path, create=True, remote=self.url, remote_upload=False) as s:
            s.save(state(3), 3)
            self.assertEqual(s.upload_state(3), "local")
            with self.assertRaises(libckpt.errors.StateError):
                s.wait_uploaded(3, timeout=0)
            s.push()
            self.assertEqual(s.upload_state(3), "remote")
            with self.assertRaises(libckpt.errors.NotFoundError):
                s.pull(99)
        with self.assertRaises(libckpt.errors.InvalidArgumentError):
            libckpt.Store(os.path.join(self.dir, "c"), create=True, remote="gopher://x")
        with self.assertRaises(libckpt.errors.NotFoundError):  # an empty remote, no create
            empty = os.path.join(self.dir, "empty")
            os.makedirs(empty)
            libckpt.Store(os.path.join(self.dir, "d"), remote=empty)

    def test_remote_stores(self):
        """Store.remote_stores(url) lists the remote's stores with no local store: who pushed
        (host, path), checkpoints, newest step, bytes."""
        self.assertEqual(libckpt.Store.remote_stores(self.url), [])
        a, b = os.path.join(self.dir, "a"), os.path.join(self.dir, "b")
        for path, steps in ((a, (1, 2)), (b, (7,))):
            with libckpt.Store(path, create=True) as s:  # its own store, not the remote's
                for step in steps:
                    s.save(state(step), step)
            with libckpt.Store(path, remote=self.url, remote_upload=False) as s:
                for step in steps:
                    s.push(step)
        got = libckpt.Store.remote_stores(self.url)
        self.assertEqual(len(got), 2)
        by_path = {g["path"]: g for g in got}
        self.assertEqual(set(by_path), {os.path.realpath(a), os.path.realpath(b)})
        self.assertEqual((by_path[os.path.realpath(a)]["checkpoints"],
                          by_path[os.path.realpath(a)]["newest_step"]), (2, 2))
        self.assertEqual(by_path[os.path.realpath(b)]["newest_step"], 7)
        self.assertTrue(all(g["bytes"] > 0 and len(g["store_id"]) == 32 and g["host"] for g in got))
        with self.assertRaises(libckpt.errors.NotFoundError):
            libckpt.Store.remote_stores(os.path.join(self.dir, "nowhere"))
        # The one to bind a replacement node to is named by its id.
        pick = by_path[os.path.realpath(b)]["store_id"]
        with libckpt.Store(os.path.join(self.dir, "c"), remote=self.url, remote_store_id=pick) as s:
            self.assertEqual(s.pull(), 7)

    def test_manager_replacement_node(self):
        path = os.path.join(self.dir, "m")
        m = libckpt.CheckpointManager(path, max_to_keep=2, remote=self.url)
        for step in (10, 20, 30):
            m.save(step, state(step))
        m.wait_uploaded(timeout=60)
        m.close()
        shutil.rmtree(path)
        m = libckpt.CheckpointManager(os.path.join(self.dir, "m2"), remote=self.url)
        self.assertEqual(m.latest_step(), 30)
        got = state(0)
        m.restore(got)
        self.assertStateEqual(got, state(30))
        m.close()

    def test_damaged_newest_warns(self):
        """load() and restore() of "latest" with the remote's newest manifest damaged read the
        newest intact checkpoint and warn (DamagedCheckpointWarning) naming the damaged one's
        key, as they do for a damaged local manifest; a directory remote only (damaged in
        place)."""
        rdir = self.url[7:] if self.url.startswith("file://") else self.url
        if not rdir.startswith("/"):
            self.skipTest("damages a remote object in place: a directory remote only")
        path = os.path.join(self.dir, "a")
        with libckpt.Store(path, create=True, remote=self.url) as s:
            s.save(state(1), 1)
            s.save(state(2), 2)
            s.wait_uploaded(timeout=60)
        key = None
        for root, _, files in os.walk(os.path.join(rdir, "libckpt1")):
            for f in files:
                if f == "00000000000000000002.ckpt":
                    key = os.path.relpath(os.path.join(root, f), rdir)
        self.assertIsNotNone(key)

        def flip(p):
            b = bytearray(open(p, "rb").read())
            b[120] ^= 0x55
            with open(p, "wb") as f:
                f.write(bytes(b))

        flip(os.path.join(rdir, key))
        with libckpt.Store(os.path.join(self.dir, "b"), remote=self.url) as s:
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                got = s.load()
                into = state(0)
                self.assertEqual(s.restore(into), 1)
            self.assertStateEqual(got, state(1))
            self.assertStateEqual(into, state(1))
            msgs = [str(x.message) for x in w if x.category is libckpt.DamagedCheckpointWarning]
            self.assertEqual(len(msgs), 2, msgs)
            self.assertIn("checkpoint 2 is damaged", msgs[0])
            self.assertIn(key, msgs[0])
            with warnings.catch_warnings(record=True) as w:  # a given step: nothing to say
                warnings.simplefilter("always")
                s.load(1)
            self.assertEqual([x for x in w if x.category is libckpt.DamagedCheckpointWarning], [])
        flip(os.path.join(path, "manifests", "00000000000000000002.ckpt"))  # the local path
        with libckpt.Store(path) as s:
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                self.assertStateEqual(s.load(), state(1))
            msgs = [str(x.message) for x in w if x.category is libckpt.DamagedCheckpointWarning]
            self.assertEqual(len(msgs), 1, msgs)
            self.assertIn(os.path.join("manifests", "00000000000000000002.ckpt"), msgs[0])


if __name__ == "__main__":
    unittest.main()
