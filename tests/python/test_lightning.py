#!/usr/bin/env python3
"""libckpt.lightning.LibckptCheckpointIO (tests/python/t-python-lightning.sh; the torch2 virtual
environment, with Lightning): a small LightningModule (AdamW, a StepLR schedule) trained on CPU
for 4 epochs in one run, against 2 epochs, stopped, then resumed from ModelCheckpoint's "last"
to 4 epochs: the weights, optimizer state and the schedule end bit for bit alike, with the plain
plugin and under AsyncCheckpointIO.  The checkpoint files Lightning sees are pointers into one
store (relative to the pointer), each step recording Lightning's file name, step and epoch;
ModelCheckpoint's top-1 removal deletes the store's steps it no longer needs; a run directory
copied with its store reads the copy (an older absolute pointer too, with a warning); a pointer
to a pruned step says so; a damaged chunk fails the resume (a ChecksumError), never resumes
from bad data.
"""

import json
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))


def module_class():
    import torch
    import lightning as L

    class Tiny(L.LightningModule):
        def __init__(self, width=32):
            super().__init__()
            self.save_hyperparameters()
            self.net = torch.nn.Sequential(torch.nn.Linear(8, width), torch.nn.Tanh(),
                                           torch.nn.Linear(width, 1))

        def training_step(self, batch, _idx):
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self):
            opt = torch.optim.AdamW(self.parameters(), lr=1e-2)
            return [opt], [torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7)]

    return Tiny


def data():
    import torch
    g = torch.Generator().manual_seed(0)
    x = torch.randn(40, 8, generator=g)
    ds = torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True).sin())
    return torch.utils.data.DataLoader(ds, batch_size=8, shuffle=False)  # 5 steps an epoch


def trainer(root, epochs, plugin, ckpt=True):
    import lightning as L
    from lightning.pytorch.callbacks import ModelCheckpoint
    cbs = [ModelCheckpoint(dirpath=os.path.join(root, "ckpt"), save_last=True, save_top_k=1,
                           monitor=None, every_n_epochs=1)] if ckpt else []
    return L.Trainer(max_epochs=epochs, accelerator="cpu", devices=1, logger=False,
                     enable_progress_bar=False, enable_model_summary=False, callbacks=cbs,
                     plugins=[plugin] if plugin is not None else None,
                     enable_checkpointing=ckpt, deterministic=True, default_root_dir=root)


def final_state(m, tr):
    """Weights, optimizer state and the schedule after a fit."""
    import torch
    st = {f"w.{k}": v.detach().clone() for k, v in m.state_dict().items()}
    opt = tr.optimizers[0].state_dict()
    for i, s in opt["state"].items():
        for k, v in s.items():
            st[f"o.{i}.{k}"] = v.clone() if isinstance(v, torch.Tensor) else v
    st["lr"] = tr.lr_scheduler_configs[0].scheduler.get_last_lr()
    return st


def same(a, b, what):
    import torch
    assert sorted(a) == sorted(b), f"{what}: {sorted(set(a) ^ set(b))}"
    for k in a:
        if isinstance(a[k], torch.Tensor):
            assert torch.equal(a[k], b[k]), f"{what}: {k} differs"
        else:
            assert a[k] == b[k], f"{what}: {k}: {a[k]!r} != {b[k]!r}"


def run(tmp, name, make_plugin, reference):
    import lightning as L
    import libckpt
    Tiny = module_class()
    root = os.path.join(tmp, name)
    L.seed_everything(0, workers=True)
    m = Tiny()
    tr = trainer(root, 2, make_plugin())
    tr.fit(m, data())
    last = os.path.join(root, "ckpt", "last.ckpt")
    with open(last) as f:
        ptr = json.load(f)
    store = os.path.normpath(os.path.join(os.path.dirname(last), ptr["store"]))
    assert ptr["format"] == "libckpt-lightning-pointer/2" and not os.path.isabs(ptr["store"]) \
        and os.path.isdir(store), ptr
    files = sorted(f for f in os.listdir(os.path.join(root, "ckpt")) if f.endswith(".ckpt"))
    with libckpt.Store(store, read_only=True) as st:
        steps = st.steps()
        metas = [st.metadata(s) for s in steps]
    names = sorted(md["lightning.file"] for md in metas)
    assert names == files, f"store holds {names}, Lightning's directory {files}"
    for md in metas:  # Lightning's step, as its file names say it ("epoch=1-step=10.ckpt")
        if "step=" in md["lightning.file"]:
            assert f"step={md['lightning.global_step']}." in md["lightning.file"], md
        assert md["lightning.epoch"].isdigit(), md
    print(f"ok: {name}: 2 epochs; Lightning's files {files} point into one store, steps {steps} "
          f"(top-1 removal deleted the older ones)")

    L.seed_everything(123, workers=True)  # the resume must not depend on the seed
    m2 = Tiny()
    tr2 = trainer(root, 4, make_plugin())
    tr2.fit(m2, data(), ckpt_path=last)
    same(final_state(m2, tr2), reference, f"{name}: resumed after 2 epochs vs 4 epochs at once")
    print(f"ok: {name}: resumed from last.ckpt to 4 epochs, bit for bit as one run")
    return last, store


def copied_run(tmp, root):
    """A run directory copied with its store reads the copy; an older absolute pointer is read in
    the plugin's store, with a warning; a pointer whose step was pruned says so."""
    import shutil
    import warnings
    import libckpt
    from libckpt.lightning import LibckptCheckpointIO
    copy = os.path.join(tmp, "copied")
    shutil.copytree(root, copy)
    shutil.rmtree(root)  # the original is gone: the copy must not need it
    last = os.path.join(copy, "ckpt", "last.ckpt")
    io = LibckptCheckpointIO()
    ck = io.load_checkpoint(last)
    assert "state_dict" in ck and isinstance(ck.get("global_step"), int), sorted(ck)
    store = os.path.join(copy, "ckpt", libckpt.lightning._DEFAULT_STORE)
    with open(last) as f:
        step = json.load(f)["step"]
    old = os.path.join(copy, "ckpt", "old.ckpt")
    with open(old, "w") as f:  # as libckpt's earlier versions wrote them
        json.dump({"format": "libckpt-lightning-pointer/1", "store": os.path.join(root, "ckpt", "x"),
                   "step": step}, f)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        ck2 = io.load_checkpoint(old)
    assert ck2["global_step"] == ck["global_step"], (ck2["global_step"], ck["global_step"])
    msgs = [str(w.message) for w in seen if "older pointers" in str(w.message)]
    assert msgs and store in msgs[0], [str(w.message) for w in seen]
    print("ok: a copied run directory reads its copy of the store; an older absolute pointer "
          "is read there too, with a warning")
    with libckpt.Store(store) as st:
        st.delete(step, newest=True)
    try:
        io.load_checkpoint(last)
    except libckpt.NotFoundError as e:
        assert "last.ckpt" in str(e) and f"step {step}" in str(e), str(e)
        print(f"ok: a pointer to a pruned step: {str(e)[:150]}")
    else:
        raise AssertionError("loaded a pruned step")


def main():
    try:
        import lightning as L
        from lightning.pytorch.plugins.io import AsyncCheckpointIO
        from libckpt.lightning import LibckptCheckpointIO
    except ImportError as e:
        print(f"skip: {e}")
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        L.seed_everything(0, workers=True)
        m = module_class()()
        tr = trainer(os.path.join(tmp, "ref"), 4, None, ckpt=False)
        tr.fit(m, data())
        reference = final_state(m, tr)
        run(tmp, "plain", LibckptCheckpointIO, reference)
        copied_run(tmp, os.path.join(tmp, "plain"))
        store = os.path.join(tmp, "async-store")
        last, named = run(tmp, "async", lambda: AsyncCheckpointIO(LibckptCheckpointIO(store)),
                          reference)
        assert named == store, named

        # a damaged chunk: the resume raises instead of training on from bad data
        for f in os.listdir(os.path.join(store, "packs")):
            with open(os.path.join(store, "packs", f), "r+b") as fh:
                fh.seek(4096 + 64)
                fh.write(b"\x5a" * 256)
        import libckpt
        tr3 = trainer(os.path.join(tmp, "bad"), 5, LibckptCheckpointIO(store))
        try:
            tr3.fit(module_class()(), data(), ckpt_path=last)
        except libckpt.CorruptError as e:
            print(f"ok: a damaged chunk fails the resume: {type(e).__name__}: {str(e)[:160]}")
        else:
            raise AssertionError("resumed from a damaged checkpoint")
    print("python lightning ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
