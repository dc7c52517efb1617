"""CheckpointManager: save every N steps (or seconds, or on preemption), keep the last K (or the
best K by a metric, plus periodic ones), one save in flight at a time; on one process or on every
rank of a torch.distributed group."""

import datetime
import json
import signal
import threading
import time

from . import _lib as L
from . import dist as D
from ._driver import outcome, raise_first
from .errors import CkptError
from .store import Store

METRICS_KEY = "libckpt.manager.metrics"  # json of save(metrics=...), rank 0's
TIME_KEY = "libckpt.manager.time"        # rank 0's clock (unix seconds) when the save began


def _seconds(name, v):
    if v is None:
        return None
    if isinstance(v, datetime.timedelta):
        v = v.total_seconds()
    if isinstance(v, bool) or not float(v) > 0:
        raise ValueError(f"{name} must be a number of seconds > 0 (or a timedelta), got {v!r}")
    return float(v)


def _positive(name, v, none_ok=True):
    if v is None and none_ok:
        return None
    if isinstance(v, bool) or int(v) < 1:
        raise ValueError(f"{name} must be >= 1{' or None' if none_ok else ''}, got {v!r}")
    return int(v)


def _signals(spec):
    if not spec:
        return ()
    if spec is True:
        return (signal.SIGTERM,)
    return tuple(spec) if isinstance(spec, (list, tuple, set, frozenset)) else (spec,)


def _groups(group):
    """(the saves' DistGroup, the manager's own DistGroup) for CheckpointManager's group argument,
    or (None, None): this process alone."""
    if group is None or group is False or group is D.LOCAL:
        return None, None
    import torch.distributed as dist
    if group is True or (isinstance(group, str) and group == "default"):
        if not (dist.is_available() and dist.is_initialized()):
            return None, None  # the same script without torchrun: one process
        base = None
    elif isinstance(group, str):
        raise ValueError(f"group must be a torch.distributed ProcessGroup, a libckpt.DistGroup, "
                         f"True or 'default' (the default group), or None (this process), "
                         f"got {group!r}")
    else:
        base = group.pg if isinstance(group, D.DistGroup) else group
    dg = group if isinstance(group, D.DistGroup) else D.dist_group(base)
    # The manager's agreements (should_save, retention, delete) run on a gloo group of their own:
    # an async save's commit runs collectives on dg from libckpt's thread meanwhile.
    return dg, D.DistGroup(base, dg.timeout)


def _jsonable(x):
    try:
        return float(x)  # 0-d tensors, numpy scalars
    except (TypeError, ValueError):
        raise TypeError(f"metrics: {type(x).__name__} is not JSON-serializable") from None


def plan_removal(infos, max_to_keep, keep_period=None, keep_time_interval=None, best_fn=None,
                 best_mode="max", keep_checkpoints_without_metrics=True):
    """The steps retention removes, from infos [(step, time, metrics or None)] in ascending step
    order, as Orbax's CheckpointManager chooses them: nothing while at most max_to_keep exist;
    else the newest max_to_keep (with best_fn: the best max_to_keep by best_fn(metrics), 'max'
    or 'min' by best_mode; checkpoints without metrics are kept, or, with
    keep_checkpoints_without_metrics=False, ranked below the worst), every step that is a
    multiple of keep_period, the first checkpoint and each one at least keep_time_interval
    seconds after the previous one so kept.  Unlike Orbax, the newest checkpoint is always kept
    (resuming needs it; libckpt's prune never removes it either)."""
    if max_to_keep is None or len(infos) <= max_to_keep:
        return []
    if best_fn is not None:
        without = [i for i in infos if i[2] is None]
        ranked = sorted((i for i in infos if i[2] is not None), key=lambda i: best_fn(i[2]),
                        reverse=(best_mode == "min"))  # the best last
    else:
        without, ranked = [], list(infos)
    if not keep_checkpoints_without_metrics:
        ranked, without = without + ranked, []
    kept = {i[0] for i in without + ranked[-max_to_keep:]} | {infos[-1][0]}
    if keep_period:
        kept |= {i[0] for i in infos if i[0] % keep_period == 0}
    if keep_time_interval:
        mark = None
        for step, t, _ in infos:
            if mark is None or t >= mark + keep_time_interval:
                kept.add(step)
                mark = t
    return [i[0] for i in infos if i[0] not in kept]


class CheckpointManager:
    """Saves a training state at an interval and keeps a bounded number of checkpoints, on one
    process or, with group=, on every rank of a torch.distributed group (the same code on every
    rank).  See python/README.md ("CheckpointManager") for the whole contract.

    CheckpointManager(path, save_interval_steps=1, max_to_keep=None, keep_period=None,
                      async_save=True, group=None, best_fn=None, best_mode="max",
                      keep_checkpoints_without_metrics=True, keep_time_interval=None,
                      save_interval_secs=None, save_on_preemption=False, keep_tags=None,
                      **store_options)

    - remote= (a store option): a second copy off the node (file:///dir, s3://bucket/prefix).
      Each checkpoint is uploaded in the background once durable (with a group, every rank's
      handle its own packs, rank 0 the manifest last); wait_uploaded(timeout=None) waits for them.  On a replacement node (no
      checkpoint locally) the remote's newest is pulled when the manager opens, so restore()
      finds it.
    - group: None (this process alone, as before), True or "default" (the default group when
      torch.distributed is initialized, else this process alone), a ProcessGroup or a
      libckpt.DistGroup.  With a group, saves are multi-rank (Store.save_async(group=)), and
      every call but metrics()/best_step() is collective: call them on every rank in the same
      order.  Decisions are rank 0's (the steps kept, the clock), broadcast.
    - keep_tags: a tag or tags; a checkpoint saved with one of them (save(tags=)) is never
      removed by the retention, whatever max_to_keep says (restic's --keep-tag).
    - save(step, state, force=False, metadata=None, metrics=None, tags=None) saves when should_save(step)
      (or force) and returns whether it did; it returns once the state was copied out, and with
      async_save the writing goes on in the background, one save in flight: the next save first
      waits for the previous one to be durable, then applies the retention (plan_removal).
    - should_save(step): step > the last saved step, and a multiple of save_interval_steps, or
      save_interval_secs passed since the last save (rank 0's clock), or a preemption signal
      arrived on any rank (save_on_preemption; see `preempted`).
    - The error of a background save is raised by the next call, once: it is never lost.
    """

    def __init__(self, path, save_interval_steps=None, max_to_keep=None, keep_period=None,
                 async_save=True, group=None, best_fn=None, best_mode="max",
                 keep_checkpoints_without_metrics=True, keep_time_interval=None,
                 save_interval_secs=None, save_on_preemption=False, keep_tags=None,
                 **store_options):
        self.keep_tags = frozenset(L.tag_list(keep_tags, "keep_tags"))
        self.save_interval_secs = _seconds("save_interval_secs", save_interval_secs)
        if save_interval_steps is None and self.save_interval_secs is None:
            save_interval_steps = 1
        self.save_interval_steps = _positive("save_interval_steps", save_interval_steps)
        self.max_to_keep = _positive("max_to_keep", max_to_keep)
        self.keep_period = _positive("keep_period", keep_period)
        self.keep_time_interval = _seconds("keep_time_interval", keep_time_interval)
        if best_mode not in ("min", "max"):
            raise ValueError(f"best_mode must be 'min' or 'max', got {best_mode!r}")
        if best_fn is not None and not callable(best_fn):
            raise TypeError(f"best_fn must be callable (metrics -> number), got {best_fn!r}")
        self.best_fn, self.best_mode = best_fn, best_mode
        self.keep_checkpoints_without_metrics = bool(keep_checkpoints_without_metrics)
        self.async_save = bool(async_save)
        self._signals = _signals(save_on_preemption)
        self._pending = None    # (handle, step) of the save in flight
        self.last_durable = None  # SaveStats of the newest save known durable
        self._error = None      # a background save's error not raised yet
        self._lock = threading.RLock()
        self._clock = time.time  # rank 0's decides; tests replace it
        self._meta_cache = {}   # step -> (time, metrics), read on rank 0 for the retention
        self._decided = None    # (step, due): should_save's answer, reused by save(step)
        self._flag = False      # a preemption signal arrived on this process
        self.preempted = False  # every rank agreed on a preemption and its save is durable
        self._dg, self._ctl = _groups(group)
        store_options.setdefault("create", True)
        self.store = self._open(path, store_options)
        if store_options.get("remote"):  # a replacement node: the remote's latest comes back
            self._on_root("pulling from the remote", self._pull_if_empty)
        self._steps = self._on_root("listing the checkpoints", self.store.steps)
        self._last_time = self._on_root("the last save's time", self._latest_time)
        self._old_handlers = {}
        for s in self._signals:
            self._old_handlers[s] = signal.signal(s, self._on_signal)

    def _pull_if_empty(self):
        """No checkpoint locally but some on the remote: the newest is pulled."""
        if not self.store.steps() and self.store.remote_steps():
            self.store.pull()

    def wait_uploaded(self, timeout=None):
        """Waits until every checkpoint saved so far is on the remote, at most timeout seconds;
        collective with a group (every rank waits for the packs its handle uploads, then rank 0
        for the rest and the manifests; every rank returns after it, or raises its error)."""
        self._reap(True)
        if self._ctl is not None and self._ctl.rank != 0 and self.store.remote:
            try:  # our own packs first, so that closing after this cancels nothing
                self.store.wait_uploaded("latest", timeout)
            except Exception:  # noqa: BLE001  rank 0 sends a share that did not come
                pass
        self._on_root("waiting for the uploads", lambda: self.store.wait_uploaded("latest", timeout))

    # ------------------------------------------------------------------ collectives
    def _on_root(self, what, fn):
        """fn() on rank 0 (or alone): its result on every rank, or its error raised on every rank."""
        if self._ctl is None:
            return fn()
        out, err = None, None
        if self._ctl.rank == 0:
            try:
                out = ("ok", fn())
            except Exception as e:  # noqa: BLE001  every rank raises it
                err, out = e, ("err", outcome(e))
        out = self._ctl.broadcast_object(out, what)
        if err is not None:
            raise err
        if out[0] == "err":
            raise_first(what, [out[1]])
        return out[1]

    def _open(self, path, options):
        """The store, opened by rank 0 first (it may create it), then by the others."""
        if self._ctl is None:
            return Store(path, **options)
        box = []
        self._on_root("opening the store", lambda: box.append(Store(path, **options)))
        err = None
        if not box:
            try:
                box.append(Store(path, **options))
            except Exception as e:  # noqa: BLE001  every rank raises it
                err = e
        outs = self._ctl.gather_object(outcome(err), "opening the store")
        if err is not None:
            raise err
        if any(o is not None for o in outs):
            box[0].close()
        raise_first("opening the store", outs)
        return box[0]

    def _agree(self, flags):
        """The element-wise max of small ints over the group (a preemption on any rank)."""
        if self._ctl is None:
            return flags
        import torch
        import torch.distributed as dist
        t = torch.tensor(flags, dtype=torch.int64)
        self._ctl._run("agreeing on a save", lambda: dist.all_reduce(t, op=dist.ReduceOp.MAX,
                                                                      group=self._ctl.pg))
        return [int(x) for x in t]

    # ------------------------------------------------------------------ state of the saves
    def _reap(self, block):
        """Finishes the save in flight (waiting when block), then applies the retention. Any
        error is kept and raised by _raise().  With a group only blocking reaps run (at the same
        call on every rank): a poll could differ between ranks."""
        if self._pending is None:
            return
        h, _ = self._pending
        if not block and (self._ctl is not None or not h.done()):
            return
        self._pending = None
        try:
            self.last_durable = h.wait()  # a multi-rank save raises on every rank alike
        except CkptError as e:
            self._error = self._error or e
            self._refresh()  # what did land, listed again
            return
        if self._ctl is not None:
            # Each rank lets go of the store's shared lock as its own wait() returns, after the
            # commit's last collective: rank 0 may delete (exclusive lock) once all have.
            import torch.distributed as dist
            self._ctl._run("after the save", lambda: dist.barrier(group=self._ctl.pg))
        if self.max_to_keep is not None:
            self._retain()  # lists the store again after pruning
        else:
            self._refresh()  # the list again: another writer may have saved meanwhile

    def _raise(self):
        if self._error is not None:
            e, self._error = self._error, None
            raise e

    def _refresh(self):
        try:
            self._steps = self._on_root("listing the checkpoints", self.store.steps)
        except CkptError as e:
            self._error = self._error or e

    def _info(self, step, listed_time):
        if step not in self._meta_cache:
            t, metrics = None, None
            if self.best_fn is not None or self.keep_time_interval is not None:
                with self.store._open_reader(step) as r:
                    meta = r.meta()
                t = float(meta[TIME_KEY]) if TIME_KEY in meta else None
                metrics = json.loads(meta[METRICS_KEY]) if METRICS_KEY in meta else None
            self._meta_cache[step] = (t, metrics)
        t, metrics = self._meta_cache[step]
        return step, listed_time if t is None else t, metrics

    def _prune(self):
        listed = self.store.list()
        infos = [self._info(i["step"], i["time"]) for i in listed]
        gone = plan_removal(infos, self.max_to_keep, self.keep_period, self.keep_time_interval,
                            self.best_fn, self.best_mode, self.keep_checkpoints_without_metrics)
        if self.keep_tags:  # kept whatever the other rules say, as prune --keep-tag
            tagged = {i["step"] for i in listed if self.keep_tags.intersection(i["tags"])}
            gone = [s for s in gone if s not in tagged]
        if gone:
            self.store.delete(gone)  # never the newest: plan_removal keeps it
            for s in gone:
                self._meta_cache.pop(s, None)
        return self.store.steps()

    def _retain(self):
        # runs right after a commit, with no save in flight, on every rank; rank 0 prunes
        try:
            self._steps = self._on_root("applying the retention", self._prune)
        except CkptError as e:
            self._error = self._error or e
            self._refresh()

    def _latest_time(self):
        """When the newest checkpoint was saved (rank 0's clock then; else its commit time), or
        now without one: save_interval_secs counts from there."""
        if self.save_interval_secs is None or not self._steps:
            return self._clock()
        step = self._steps[-1]
        with self.store._open_reader(step) as r:
            t = r.meta().get(TIME_KEY)
            return float(t) if t is not None else float(r.info()["time"])

    def _last_step(self):
        last = self._steps[-1] if self._steps else None
        if self._pending is not None:
            last = self._pending[1] if last is None else max(last, self._pending[1])
        return last

    def _on_signal(self, signum, frame):
        self._flag = True  # acted upon at the next should_save / save, on every rank

    # ------------------------------------------------------------------ API
    def _decide(self, step):
        """(due, preemption): the same on every rank (one all-reduce when time or signals count)."""
        step = int(step)
        due = self.save_interval_steps is not None and step % self.save_interval_steps == 0
        by_time = self.save_interval_secs is not None and \
            (self._ctl is None or self._ctl.rank == 0) and \
            self._clock() - self._last_time >= self.save_interval_secs
        pre = self._flag
        if self._ctl is not None and (self.save_interval_secs is not None or self._signals):
            pre, by_time = (bool(x) for x in self._agree([int(pre), int(by_time)]))
        if pre:
            self._flag = False  # every rank saw it: this decision acts on it
        last = self._last_step()
        return (due or by_time or pre) and (last is None or step > last), pre

    def should_save(self, step):
        """Whether save(step) would save (collective with a group when save_interval_secs or
        save_on_preemption is set).  save(step) right after it reuses the answer."""
        with self._lock:
            if self._decided is None or self._decided[0] != step:
                self._decided = (step,) + self._decide(step)
                if self._decided[2] and not self._decided[1]:
                    self._finish_preemption()  # this step is saved already (or in flight)
            return self._decided[1]

    def save(self, step, state, force=False, metadata=None, metrics=None, tags=None):
        """Saves `state` as checkpoint `step` if it is due (or force); returns True when a save
        was started.  metrics (a JSON-able dict; rank 0's is kept) go into the checkpoint for
        best_fn; tags (a str or list of str; rank 0's are kept) label it (Store.save_async).  After a preemption the save is waited for and `preempted` is set.  Raises the
        error of the previous save, if it failed."""
        with self._lock:
            if self._ctl is None:
                self._reap(block=False)
                self._raise()
            self.should_save(step)
            _, due, pre = self._decided
            self._decided = None
            if not (force or due):
                return False
            tags = L.tag_list(tags, f"checkpoint {step}")
            meta = {TIME_KEY: repr(self._clock())}
            if metrics is not None:
                meta[METRICS_KEY] = json.dumps(metrics, default=_jsonable)
            self._reap(block=True)  # one save in flight: the previous must be durable
            self._raise()
            self._start(step, state, metadata, meta, tags)
            if pre:
                self._finish_preemption()
            return True

    def _start(self, step, state, metadata, meta, tags):
        self._last_time = float(meta[TIME_KEY])
        h = self.store.save_async(state, step, metadata=metadata, _binding_meta=meta, tags=tags,
                                  group=self._dg or D.LOCAL)
        self._pending = (h, int(step))
        if self.async_save:
            try:
                h.wait_snapshot()  # the caller's tensors may change when save() returns
            except CkptError:
                pass  # the same error is raised by h.wait() in _reap
        self._reap(block=not self.async_save)
        self._raise()

    def _finish_preemption(self):
        self._reap(block=True)
        self.preempted = True
        self._raise()

    def wait_until_finished(self):
        """Waits for the save in flight to be durable (and the retention applied); raises its error."""
        with self._lock:
            self._reap(block=True)
            self._raise()

    @property
    def pending_step(self):
        """The step of the save in flight (save() with async_save returned; not yet known
        durable), or None.  latest_step() and all_steps() list durable checkpoints only, so they
        leave it out until then; wait_until_finished() makes it durable and listed.  Its error,
        if it failed, is raised by the manager's next call, not here."""
        with self._lock:
            self._reap(block=False)
            return None if self._pending is None else self._pending[1]

    def latest_step(self):
        """The newest durable checkpoint's step known to the manager (its list, read at start,
        after each save and by reload()), or None.  The save in flight is not in it until it is
        durable (pending_step names it)."""
        with self._lock:
            self._reap(block=False)
            self._raise()
            return self._steps[-1] if self._steps else None

    def all_steps(self, read=False):
        """The steps of the durable checkpoints, ascending (read=True: reload() first).  The
        save in flight is left out until it is durable: pending_step names it, and
        wait_until_finished() makes it durable and listed.  With a group it is listed only after
        a call that waits for it (the next save, wait_until_finished, restore, delete): every
        rank's list stays the same, where a poll could differ between ranks."""
        with self._lock:
            self._reap(block=False)
            self._raise()
            if read:
                self.reload()
            return list(self._steps)

    def reload(self):
        """Reads the store's list of checkpoints again (and forgets the metrics read): after
        another tool changed the store.  Returns the steps."""
        with self._lock:
            self._meta_cache.clear()
            self._steps = self._on_root("listing the checkpoints", self.store.steps)
            return list(self._steps)

    def delete(self, step):
        """Deletes checkpoint `step` (the newest too); collective with a group: rank 0 deletes,
        the others wait and raise what it raised.  A save in flight is waited for first."""
        with self._lock:
            self._reap(block=True)
            self._raise()
            step = int(step)

            def rm():
                self.store.delete([step], newest=True)
                return self.store.steps()
            self._steps = self._on_root(f"deleting checkpoint {step}", rm)
            self._meta_cache.pop(step, None)

    def metrics(self, step):
        """The metrics saved with checkpoint `step` (a dict), or None (read on this rank)."""
        with self.store._open_reader(step) as r:
            m = r.meta().get(METRICS_KEY)
        return None if m is None else json.loads(m)

    def best_step(self):
        """The step with the best metrics by best_fn (the latest without best_fn), or None."""
        if self.best_fn is None:
            return self.latest_step()
        scored = [(self.best_fn(m), s) for s in self.all_steps()
                  for m in (self.metrics(s),) if m is not None]
        if not scored:
            return None
        return (max if self.best_mode == "max" else min)(scored)[1]

    def restore(self, state, step=None, strict=True):
        """Restores `state` from checkpoint `step` (None: the latest) as Store.restore does;
        returns the step.  A save in flight is waited for first, so the latest is the newest.
        With a group, rank 0 resolves the step and every rank restores that one."""
        with self._lock:
            self._reap(block=True)
            self._raise()
            return self.store.restore(state, "latest" if step is None else step, strict=strict,
                                      group=self._dg or D.LOCAL)

    def close(self):
        """Waits for the save in flight, applies the retention, closes the store and puts the
        signal handlers back; raises the first error not raised yet (collective with a group)."""
        with self._lock:
            try:
                self._reap(block=True)
            finally:
                self.store.close()
                for s, old in self._old_handlers.items():
                    signal.signal(s, old)
                self._old_handlers = {}
            self._raise()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            self.close()
        except CkptError:
            if exc_type is None:
                raise

    def __repr__(self):
        who = "" if self._ctl is None else f" rank {self._ctl.rank} of {self._ctl.size}"
        return (f"<libckpt.CheckpointManager {self.store.path!r}{who} every "
                f"{self.save_interval_steps} keep {self.max_to_keep}>")
