"""Tests of what trainers use: Stateful objects, strict=False reporting, CheckpointManager,
shared storage, OrderedDict/_metadata, missing stores, readers beside a writer, partial loads.

Run: /usr/bin/python3 tests/python/test_trainer.py   (tests/python/t-python-trainer.sh in
`make check`).  CKPT_LIBRARY selects the library (default: build/lib).
"""

import collections
import ctypes
import os
import sys
import unittest
import warnings

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_libckpt import Base, MiB, libckpt, L  # noqa: E402


def net(seed=0):
    torch.manual_seed(seed)
    # BatchNorm: buffers, and a version in state_dict()._metadata
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(),
                               torch.nn.Linear(16, 8))


def train(model, opt, sched, steps, first=0):
    for s in range(first, first + steps):
        g = torch.Generator().manual_seed(s)
        loss = model(torch.randn(4, 8, generator=g)).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step()


def trio(seed=0):
    m = net(seed)
    o = torch.optim.AdamW(m.parameters(), lr=0.01)
    return m, o, torch.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.5)


def same_tensors(a, b):
    """Bitwise equality of two nested state dicts."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and \
            torch.equal(a.view(-1).view(torch.uint8) if a.dim() else a.view(1),
                        b.view(-1).view(torch.uint8) if b.dim() else b.view(1))
    if isinstance(a, dict):
        return isinstance(b, dict) and set(a) == set(b) and all(same_tensors(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same_tensors(x, y) for x, y in zip(a, b))
    return a == b


class Stateful(Base):
    def test_fresh_objects_resume_exactly(self):
        m, o, s = trio()
        train(m, o, s, 3)
        self.store.save({"model": m, "optim": o, "sched": s, "step": 3}, 3)
        m2, o2, s2 = trio(seed=1)  # other weights, and an optimizer with no state yet
        self.assertEqual(o2.state_dict()["state"], {})
        state = {"model": m2, "optim": o2, "sched": s2, "step": 0}
        res = self.store.restore(state)
        self.assertEqual(res, 3)
        self.assertEqual(res.not_restored, [])
        self.assertEqual(state["step"], 3)
        self.assertIs(state["model"], m2)
        self.assertTrue(same_tensors(m.state_dict(), m2.state_dict()))
        self.assertTrue(same_tensors(o.state_dict(), o2.state_dict()))
        self.assertEqual(s.state_dict(), s2.state_dict())
        train(m, o, s, 4, first=3)
        train(m2, o2, s2, 4, first=3)
        self.assertTrue(same_tensors(m.state_dict(), m2.state_dict()))
        self.assertTrue(same_tensors(o.state_dict(), o2.state_dict()))

    def test_save_async_with_objects(self):
        m, o, s = trio()
        train(m, o, s, 2)
        ref = {k: v.clone() for k, v in m.state_dict().items()}
        h = self.store.save_async({"model": m, "optim": o}, 2)
        h.wait_snapshot()
        train(m, o, s, 1, first=2)  # changes the parameters after the snapshot
        h.wait()
        out = self.store.load(2)
        self.assertIsInstance(out["model"], collections.OrderedDict)
        self.assertTrue(same_tensors(out["model"], ref))
        self.assertEqual(set(out["optim"]), {"state", "param_groups"})

    def test_state_dict_saved_restored_into_object_and_back(self):
        m, o, _ = trio()
        train(m, o, None, 2)
        self.store.save({"model": m.state_dict()}, 1)
        m2 = net(seed=5)
        self.store.restore({"model": m2})
        self.assertTrue(same_tensors(m.state_dict(), m2.state_dict()))
        self.store.save({"model": m}, 2)
        m3 = net(seed=6)
        self.store.restore({"model": m3.state_dict()}, 2)  # in place, through the aliases
        self.assertTrue(same_tensors(m.state_dict(), m3.state_dict()))

    def test_module_read_in_place_and_load_state_dict_still_called(self):
        class Seen(torch.nn.Sequential):
            def load_state_dict(self, sd, strict=True):
                self.calls = getattr(self, "calls", []) + [
                    sd["0.weight"].data_ptr() == self[0].weight.data_ptr()]
                return super().load_state_dict(sd, strict)

        m, o, _ = trio()
        train(m, o, None, 2)
        self.store.save({"model": m}, 1)
        torch.manual_seed(7)
        m2 = Seen(*net(seed=7))
        self.store.restore({"model": m2})
        self.assertEqual(m2.calls, [True])  # read into the module's own tensors, then loaded
        self.assertTrue(same_tensors(m.state_dict(), m2.state_dict()))
        m3 = Seen(*net(seed=8)).double()  # other dtype: read into new tensors, converted
        self.store.restore({"model": m3})
        self.assertEqual(m3.calls, [False])
        self.assertTrue(torch.equal(m3[0].weight, m[0].weight.double()))
        tied = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 10, bias=False))
        tied[1].weight = tied[0].weight
        self.store.save({"lm": tied}, 2)
        tied2 = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 10, bias=False))
        tied2[1].weight = tied2[0].weight
        with self.assertRaisesRegex(libckpt.NotFoundError, r"'lm': in the state \(a Sequential\) "
                                    r"but not in the checkpoint"):
            self.store.restore({"lm": tied2}, 1)
        self.store.restore({"lm": tied2}, 2)
        self.assertTrue(torch.equal(tied2[1].weight, tied[0].weight))
        self.assertIs(tied2[1].weight, tied2[0].weight)

    def test_module_mismatch_writes_nothing(self):
        m, _, _ = trio()
        self.store.save({"model": m}, 1)
        other = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16),
                                    torch.nn.ReLU(), torch.nn.Linear(16, 4))
        before = {k: v.clone() for k, v in other.state_dict().items()}
        with self.assertRaisesRegex(libckpt.MismatchError, r"'model\.3\.weight': shape mismatch"):
            self.store.restore({"model": other})
        self.assertTrue(same_tensors(before, other.state_dict()))
        bigger = torch.nn.Sequential(*net(), torch.nn.Linear(8, 2))
        with self.assertRaisesRegex(libckpt.NotFoundError, r"'model': the module's 4\.bias, "
                                    r"4\.weight are not in the checkpoint"):
            self.store.restore({"model": bigger})
        res = self.store.restore({"model": bigger}, strict=False)  # torch's strict=False
        self.assertEqual(res.not_restored, [])
        self.assertTrue(torch.equal(bigger[3].weight, m[3].weight))

    def test_optimizer_group_mismatch(self):
        m, o, _ = trio()
        train(m, o, None, 1)
        self.store.save({"optim": o}, 1)
        o2 = torch.optim.AdamW(list(net().parameters())[:2], lr=0.1)
        with self.assertRaisesRegex(libckpt.MismatchError, r"'optim': the optimizer has "
                                    r"parameter groups of sizes \[2\], the checkpoint \[6\]"):
            self.store.restore({"optim": o2})


class NotRestored(Base):
    def test_strict_false_reports_and_warns(self):
        m, o, _ = trio()
        train(m, o, None, 2)
        self.store.save({"model": m, "optim": o, "step": 2, "rng": torch.get_rng_state()}, 2)
        m2 = net(seed=3)
        with self.assertRaisesRegex(libckpt.MismatchError, r"holds entries that the given state "
                                    r"lacks: optim, rng, step"):
            self.store.restore({"model": m2})
        self.assertFalse(same_tensors(m.state_dict(), m2.state_dict()))  # nothing written
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            res = self.store.restore({"model": m2}, strict=False)
        self.assertEqual(res, 2)
        self.assertEqual(res.not_restored, ["optim", "rng", "step"])
        self.assertEqual(len(w), 1)
        self.assertIs(w[0].category, libckpt.PartialRestoreWarning)
        self.assertIn("left out 3 saved entries: optim, rng, step", str(w[0].message))
        self.assertTrue(same_tensors(m.state_dict(), m2.state_dict()))

    def test_fresh_optimizer_state_dict_is_not_silently_empty(self):
        m, o, _ = trio()
        train(m, o, None, 2)
        self.store.save({"model": m.state_dict(), "optim": o.state_dict()}, 2)
        m2, o2, _ = trio(seed=4)
        target = {"model": m2.state_dict(), "optim": o2.state_dict()}
        with self.assertRaisesRegex(libckpt.MismatchError, r"optim\.state\.0, optim\.state\.1.*"
                                    r"Pass modules and optimizers themselves"):
            self.store.restore(target)
        with self.assertWarns(libckpt.PartialRestoreWarning):
            res = self.store.restore(target, strict=False)
        self.assertEqual(res.not_restored, [f"optim.state.{i}" for i in range(6)])
        self.store.restore({"model": m2, "optim": o2})  # what the README shows
        self.assertTrue(same_tensors(o.state_dict(), o2.state_dict()))

    def test_flat_checkpoint_of_another_tool(self):
        # no libckpt.python description: written through the C API, as ckptctl import does
        lib = L.load()
        sv = ctypes.c_void_p()
        a, b = torch.arange(4.0), torch.ones(3)
        self.assertEqual(lib.ckpt_save_begin(self.store._ptr, 1, None, ctypes.byref(sv)), 0)
        for name, t in (("fc.weight", a), ("other", b)):
            desc = L.Tensor(name=name.encode(), dtype=L.F32, ndim=1, shape=L.u64s([t.numel()]),
                            mem=L.MEM_HOST, data=t.data_ptr())
            self.assertEqual(lib.ckpt_save_add(sv, ctypes.byref(desc)), 0)
        self.assertEqual(lib.ckpt_save_commit(sv, None), 0)
        x = torch.zeros(4)
        with self.assertRaisesRegex(libckpt.MismatchError, "lacks: other"):
            self.store.restore({"fc.weight": x})
        with self.assertWarns(libckpt.PartialRestoreWarning):
            self.assertEqual(self.store.restore({"fc.weight": x}, strict=False).not_restored, ["other"])
        self.assertTrue(torch.equal(x, a))
        fc = torch.nn.Module()
        fc.weight = torch.nn.Parameter(torch.zeros(4))
        res = self.store.restore({"fc": fc}, strict=False)
        self.assertEqual(res.not_restored, ["other"])
        self.assertTrue(torch.equal(fc.weight.detach(), a))


class Sharing(Base):
    def test_tied_weights_saved_once_and_shared(self):
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Embedding(100, 16), torch.nn.Linear(16, 100, bias=False))
        m[1].weight = m[0].weight  # tied, as language models tie embedding and head
        st = self.store.save(m.state_dict(), 1)
        self.assertEqual(st.tensors, 1)
        out = self.store.load()
        self.assertEqual(list(out), ["0.weight", "1.weight"])
        self.assertIs(out["0.weight"], out["1.weight"])
        m2 = torch.nn.Sequential(torch.nn.Embedding(100, 16), torch.nn.Linear(16, 100, bias=False))
        m2[1].weight = m2[0].weight
        self.store.restore(m2.state_dict())
        self.assertTrue(torch.equal(m2[1].weight, m[0].weight))
        self.assertIs(m2[1].weight, m2[0].weight)
        # untied targets both get the data
        a, b = torch.zeros(100, 16), torch.zeros(100, 16)
        self.store.restore({"0.weight": a, "1.weight": b})
        self.assertTrue(torch.equal(a, m[0].weight) and torch.equal(b, m[0].weight))

    def test_same_array_twice_and_distinct_views_apart(self):
        x = np.arange(10.0)
        t = torch.arange(6.0)
        self.store.save({"a": x, "b": x, "t": t, "u": t[:3]}, 1)
        self.assertEqual(len(self.store.tensors(1)), 3)  # a view of other shape: its own copy
        out = self.store.load()
        self.assertIs(out["a"], out["b"])
        self.assertTrue(torch.equal(out["u"], t[:3]))

    def test_ordered_dict_and_metadata(self):
        m = net()
        sd = m.state_dict()
        self.store.save({"sd": sd}, 1)
        out = self.store.load()["sd"]
        self.assertIsInstance(out, collections.OrderedDict)
        self.assertEqual(list(out), list(sd))
        self.assertEqual(out._metadata, sd._metadata)
        self.assertIsInstance(out._metadata, collections.OrderedDict)
        m2 = net(seed=2)
        m2.load_state_dict(out)
        self.assertTrue(same_tensors(m.state_dict(), m2.state_dict()))


class StoreOpen(Base):
    def test_missing_store_not_created(self):
        missing = os.path.join(self.dir, "typo")
        with self.assertRaisesRegex(libckpt.NotFoundError, r"store .*typo does not exist.*"
                                    r"create=True"):
            libckpt.Store(missing)
        self.assertFalse(os.path.exists(missing))
        with libckpt.Store(missing, create=True) as s:
            s.save({"x": torch.ones(1)}, 1)
        with libckpt.Store(missing) as s:
            self.assertEqual(s.steps(), [1])

    def test_reader_beside_writer_in_same_process(self):
        self.store.save({"x": torch.full((8,), 1.0)}, 1)
        lib = L.load()
        sv = ctypes.c_void_p()
        # this handle holds the writer lock for as long as its save is open
        self.assertEqual(lib.ckpt_save_begin(self.store._ptr, 2, None, ctypes.byref(sv)), 0)
        try:
            with libckpt.Store(self.path) as other:
                self.assertEqual(other.steps(), [1])
                self.assertEqual(other.latest_step(), 1)
                self.assertTrue(torch.equal(other.load()["x"], torch.full((8,), 1.0)))
                y = torch.zeros(8)
                self.assertEqual(other.restore({"x": y}), 1)
                self.assertEqual(other.verify(1), [])
                with self.assertRaisesRegex(libckpt.BusyError, "another handle of this process"):
                    other.save({"x": y}, 3)
            with libckpt.Store(self.path, read_only=True) as ro:
                self.assertEqual(ro.steps(), [1])
        finally:
            lib.ckpt_save_abort(sv)


class _Failing:
    """A SaveHandle whose save fails in the background once `finished` is set."""

    def __init__(self, real):
        self.real, self.finished = real, False

    def wait_snapshot(self):
        self.real.wait_snapshot()

    def done(self):
        return self.finished

    def wait(self):
        self.real.wait()
        raise libckpt.CkptIOError("injected: write of pack 7 failed", code=1, name="I/O error")


class Manager(Base):
    def manager(self, **kw):
        kw.setdefault("pool_size", "32M")
        return libckpt.CheckpointManager(os.path.join(self.dir, "m"), **kw)

    def test_interval_and_retention(self):
        x = torch.zeros(1000)
        with self.manager(save_interval_steps=2, max_to_keep=2, keep_period=4) as mgr:
            self.assertIsNone(mgr.latest_step())
            did = []
            for step in range(1, 11):
                x.fill_(step)
                did.append(mgr.save(step, {"x": x, "step": step}))
            self.assertEqual(did, [False, True] * 5)
            self.assertTrue(mgr.save(11, {"x": x, "step": 11}, force=True))
            mgr.wait_until_finished()
            # newest 2 (10, 11) and every multiple of 4
            self.assertEqual(mgr.all_steps(), [4, 8, 10, 11])
            self.assertEqual(mgr.latest_step(), 11)
            y = {"x": torch.empty(1000), "step": 0}
            self.assertEqual(mgr.restore(y, step=8), 8)
            self.assertEqual(y["step"], 8)
            self.assertTrue(torch.all(y["x"] == 8))
        with libckpt.Store(os.path.join(self.dir, "m")) as s:
            self.assertEqual(s.steps(), [4, 8, 10, 11])

    def test_save_returns_after_snapshot(self):
        t = torch.arange(4 * MiB, dtype=torch.float32)
        ref = t.clone()
        with self.manager() as mgr:
            self.assertTrue(mgr.save(1, {"t": t}))
            t.fill_(-1)  # at once: the write may still be running
            mgr.wait_until_finished()
            self.assertTrue(torch.equal(mgr.store.load(1)["t"], ref))

    def test_sync_save_is_durable_on_return(self):
        with self.manager(async_save=False, max_to_keep=1) as mgr:
            for step in (1, 2, 3):
                mgr.save(step, {"x": torch.full((4,), float(step))})
                self.assertEqual(mgr.latest_step(), step)
                self.assertEqual(mgr.all_steps(), [step])  # retention applied already

    def test_stateful_resume(self):
        m, o, s = trio()
        with self.manager(save_interval_steps=3) as mgr:
            for step in range(1, 7):
                train(m, o, s, 1, first=step)
                mgr.save(step, {"model": m, "optim": o, "sched": s})
        m2, o2, s2 = trio(seed=9)
        with self.manager() as mgr:
            self.assertEqual(mgr.restore({"model": m2, "optim": o2, "sched": s2}), 6)
        self.assertTrue(same_tensors(m.state_dict(), m2.state_dict()))
        self.assertTrue(same_tensors(o.state_dict(), o2.state_dict()))
        self.assertEqual(s.state_dict(), s2.state_dict())

    def test_background_error_raised_at_next_call(self):
        mgr = self.manager(max_to_keep=1)
        mgr.save(1, {"x": torch.ones(4)})
        mgr.wait_until_finished()
        real = mgr.store.save_async
        failing = []
        mgr.store.save_async = lambda *a, **k: failing.append(_Failing(real(*a, **k))) or failing[-1]
        self.assertTrue(mgr.save(2, {"x": torch.ones(4)}))  # still running: nothing to say yet
        failing[0].finished = True
        with self.assertRaisesRegex(libckpt.CkptIOError, "injected"):
            mgr.latest_step()
        self.assertEqual(mgr.latest_step(), 2)  # raised once; the save itself did land
        self.assertEqual(mgr.all_steps(), [1, 2])  # no retention after a failed save
        mgr.save(3, {"x": torch.ones(4)})
        with self.assertRaisesRegex(libckpt.CkptIOError, "injected"):
            mgr.close()  # the last save's error, not lost at close

    def test_bad_arguments(self):
        with self.assertRaisesRegex(ValueError, "save_interval_steps"):
            self.manager(save_interval_steps=0)
        with self.assertRaisesRegex(ValueError, "max_to_keep"):
            self.manager(max_to_keep=0)
        with self.assertRaisesRegex(ValueError, "best_mode"):
            self.manager(best_mode="lowest")
        with self.assertRaisesRegex(ValueError, "keep_time_interval"):
            self.manager(keep_time_interval=-1)

    def test_delete_and_reload(self):
        # group=True without torch.distributed initialized: this process alone
        with self.manager(group=True) as mgr:
            for step in (1, 2, 3):
                mgr.save(step, {"x": torch.full((4,), float(step))})
            mgr.delete(2)
            self.assertEqual(mgr.all_steps(), [1, 3])
            mgr.delete(3)  # the newest too, as Orbax allows
            self.assertEqual((mgr.all_steps(), mgr.latest_step()), ([1], 1))
            with self.assertRaises(libckpt.NotFoundError):
                mgr.delete(7)
            with libckpt.Store(os.path.join(self.dir, "m")) as other:  # another writer
                other.save({"x": torch.ones(4)}, 5)
            self.assertEqual(mgr.all_steps(), [1])  # the manager's list, as Orbax's
            self.assertEqual(mgr.reload(), [1, 5])
            self.assertEqual((mgr.latest_step(), mgr.all_steps(read=True)), (5, [1, 5]))
            with self.assertRaisesRegex(libckpt.InvalidArgumentError, "step 5 is the newest"):
                mgr.store.delete(5)  # Store.delete keeps the newest unless newest=True
            self.assertFalse(mgr.save(4, {"x": torch.ones(4)}))  # not after the latest step
        with libckpt.Store(os.path.join(self.dir, "m")) as s:
            self.assertEqual(s.steps(), [1, 5])

    def test_best_fn(self):
        loss = {1: 5.0, 2: 1.0, 3: 4.0, 4: 2.0, 5: 6.0, 6: 3.0}
        kw = dict(max_to_keep=2, best_fn=lambda m: m["loss"], best_mode="min")
        with self.manager(**kw) as mgr:
            for step in range(1, 7):
                mgr.save(step, {"x": torch.ones(4)}, metrics={"loss": torch.tensor(loss[step])})
                mgr.wait_until_finished()
            # the best 2 (steps 2 and 4) and the latest
            self.assertEqual(mgr.all_steps(), [2, 4, 6])
            self.assertEqual((mgr.best_step(), mgr.metrics(4)), (2, {"loss": 2.0}))
            mgr.save(7, {"x": torch.ones(4)})  # without metrics: kept, not ranked
            mgr.save(8, {"x": torch.ones(4)}, metrics={"loss": 0.5})
        self.assertEqual(libckpt.Store(os.path.join(self.dir, "m")).steps(), [2, 7, 8])
        self.assertEqual(libckpt.Store(os.path.join(self.dir, "m")).metadata(8), {})
        # a restart reads the saved metrics; without metrics ranks below the worst (Orbax's
        # keep_checkpoints_without_metrics=False); best_mode="max" keeps the highest
        with self.manager(keep_checkpoints_without_metrics=False, **kw) as mgr:
            mgr.save(9, {"x": torch.ones(4)}, metrics={"loss": 9.0})
            mgr.wait_until_finished()
            self.assertEqual(mgr.all_steps(), [2, 8, 9])
        kw["best_mode"] = "max"
        with self.manager(**kw) as mgr:
            mgr.save(10, {"x": torch.ones(4)}, metrics={"loss": 0.1})
            mgr.wait_until_finished()
            self.assertEqual(mgr.all_steps(), [2, 9, 10])

    def test_time_based(self):
        now = [0.0]
        with self.manager(max_to_keep=1, keep_time_interval=25) as mgr:
            mgr._clock = lambda: now[0]
            kept = []
            for step in range(1, 8):
                now[0] = 10.0 * (step - 1)  # saved at 0, 10, ..., 60 s on the manager's clock
                mgr.save(step, {"x": torch.ones(4)})
                mgr.wait_until_finished()
                kept.append(mgr.all_steps())
            # the first, then each one at least 25 s after the previous kept one; the newest
            self.assertEqual(kept[-1], [1, 4, 7])
            self.assertEqual(kept[2], [1, 3])
        # no step rule: by time only, counted from the latest checkpoint's save (60 s)
        with self.manager(save_interval_secs=30) as mgr:
            mgr._clock = lambda: now[0]
            did = []
            for step, t in ((8, 80), (9, 95), (10, 120), (11, 125)):
                now[0] = float(t)
                did.append(mgr.save(step, {"x": torch.ones(4)}))
            self.assertEqual(did, [False, True, False, True])

    def test_save_on_preemption(self):
        import signal
        before = signal.getsignal(signal.SIGTERM)
        stopped = None
        with self.manager(save_interval_steps=100, save_on_preemption=True) as mgr:
            for step in range(1, 21):
                if step == 5:
                    signal.raise_signal(signal.SIGTERM)  # the process survives it
                mgr.save(step, {"x": torch.full((4,), float(step))})
                if mgr.preempted:
                    stopped = step
                    break
            self.assertEqual((stopped, mgr.all_steps()), (5, [5]))  # durable already
        self.assertIs(signal.getsignal(signal.SIGTERM), before)  # put back by close()


class Partial(Base):
    def make(self):
        torch.manual_seed(0)
        return {"model": {"fc1": {"w": torch.randn(4, 4), "b": torch.randn(4)},
                          "fc2": {"w": torch.randn(2, 4)}},
                "layers": [torch.ones(3), torch.full((3,), 2.0)], "step": 3, "name": "run"}

    def test_keys_select_entries(self):
        st = self.make()
        self.store.save(st, 1)
        out = self.store.load(1, keys="model.fc1")
        self.assertEqual(list(out), ["model"])
        self.assertEqual(list(out["model"]), ["fc1"])
        self.assertTrue(torch.equal(out["model"]["fc1"]["w"], st["model"]["fc1"]["w"]))
        out = self.store.load(keys=["layers.1", "step"])
        self.assertEqual(set(out), {"layers", "step"})
        self.assertIsNone(out["layers"][0])
        self.assertTrue(torch.equal(out["layers"][1], st["layers"][1]))
        self.assertEqual(out["step"], 3)
        with self.assertRaisesRegex(libckpt.NotFoundError, "named model.fc$|named model.fc "):
            self.store.load(keys="model.fc")  # whole components only: not model.fc1
        with self.assertRaises(TypeError):
            self.store.load(keys=[1])

    def test_keys_read_only_the_chunks_needed(self):
        a, b = torch.randn(MiB // 4), torch.randn(MiB // 4)
        self.store.save({"a": a}, 1)
        self.store.save({"a": a, "b": b}, 2)  # b's chunk is the only one in the second pack
        packs = sorted(os.listdir(os.path.join(self.path, "packs")))
        self.assertEqual(len(packs), 2)
        with open(os.path.join(self.path, "packs", packs[1]), "r+b") as f:
            f.seek(64 * 1024)
            f.write(b"\xa5" * 4096)  # damage b's data
        with self.assertRaises(libckpt.CorruptError):
            self.store.load(2)
        out = self.store.load(2, keys=["a"])  # never reads the damaged pack
        self.assertTrue(torch.equal(out["a"], a))

    def test_map_location(self):
        st = self.make()
        self.store.save(st, 1)
        for ml in ("cpu", torch.device("cpu"), {"cpu": "cpu"}):
            out = self.store.load(map_location=ml)
            self.assertEqual(out["model"]["fc2"]["w"].device.type, "cpu")
        seen = []

        def to_double(t, loc):
            seen.append(loc)
            return t.double()
        out = self.store.load(map_location=to_double, keys="model")
        self.assertEqual(out["model"]["fc1"]["b"].dtype, torch.float64)
        self.assertEqual(seen, ["cpu"] * 3)
        with self.assertRaisesRegex(ValueError, "not both"):
            self.store.load(device="cpu", map_location="cpu")
        if torch.cuda.is_available():
            out = self.store.load(map_location="cuda:0")
            self.assertEqual(out["layers"][0].device.type, "cuda")


class Slices(Base):
    def test_slices_match_indexing(self):
        torch.manual_seed(0)
        t = torch.randn(1000, 300)  # 1.2 MB: two chunks, rows straddle the boundary
        a = np.arange(24, dtype=np.int16).reshape(2, 3, 4)
        self.store.save({"w": t, "a": a, "s": torch.tensor(2.5), "e": torch.empty(0, 3)}, 1)
        sl = self.store.get_slice("w")
        self.assertEqual((sl.shape, sl.dtype, len(sl)), ((1000, 300), "F32", 1000))
        for key in (slice(0, 10), slice(870, 880), slice(-5, None), slice(None, None, 7),
                    slice(900, 100, -3), slice(5, 5), 5, -1, (slice(2, 9), slice(3, 7)),
                    (4, slice(None, 2)), Ellipsis):
            neg = isinstance(key, slice) and (key.step or 1) < 0  # torch has no negative steps
            got, want = sl[key], t[list(range(*key.indices(1000)))] if neg else t[key]
            self.assertTrue(torch.equal(got, want), key)
            self.assertEqual(got.shape, want.shape, key)
        with self.assertRaises(IndexError):
            sl[1000]
        sa = self.store.get_slice("a")
        self.assertIsInstance(sa[1:], np.ndarray)
        np.testing.assert_array_equal(sa[1:, 2], a[1:, 2])
        self.assertEqual(self.store.get_slice("s")[()].item(), 2.5)
        self.assertEqual(tuple(self.store.get_slice("e")[0:0].shape), (0, 3))
        with self.assertRaises(libckpt.NotFoundError):
            self.store.get_slice("nope")

    def test_slice_reads_only_its_chunks(self):
        t = torch.randn(4, MiB // 4)  # one 1 MiB chunk per row
        self.store.save({"w": t}, 1)
        lib = L.load()
        r = ctypes.c_void_p()
        self.assertEqual(lib.ckpt_reader_open(self.store._ptr, 1, 0, ctypes.byref(r)), 0)
        ci = L.ChunkInfo()
        self.assertEqual(lib.ckpt_reader_chunk(r, 0, 0, ctypes.byref(ci)), 0)
        lib.ckpt_reader_close(r)
        pack = os.path.join(self.path, "packs", f"{ci.pack_id:08d}.pack")
        with open(pack, "r+b") as f:
            f.seek(ci.offset + ci.disk_bytes // 2)
            f.write(b"\x5a" * 4096)  # damage chunk 0 (row 0)
        self.assertTrue(torch.equal(self.store.get_slice("w")[1:4], t[1:4]))
        with self.assertRaisesRegex(libckpt.CorruptError, "chunk 0"):
            self.store.get_slice("w")[0:2]


if __name__ == "__main__":
    torch.set_num_threads(2)
    unittest.main(verbosity=2)
