"""Store, SaveHandle and SaveStats (defined in _common.py): the Python face of a libckpt store."""

import contextlib
import ctypes
import os
import re
import threading
import time
import warnings
import weakref

from . import _dread
from . import _dsave
from . import _lib as L
from . import _restore as R
from . import _select as S
from . import _tree as T
from . import dist as _dist
from . import _driver
from ._common import SaveStats, _step_arg  # noqa: F401  SaveStats: public
from ._driver import ReadDriver, SaveDriver, region
from ._target import _alloc, _check_target, _data_ptr
from .errors import (CkptError, CkptIOError, CorruptError, InvalidArgumentError, NoSpaceError,
                     NotFoundError, PermissionDeniedError, StateError, UnsupportedError,
                     VersionError)


_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$", re.I)


def _size(name, v):
    """Accepts an int or a string like '64M', '1GiB' (powers of 1024)."""
    if isinstance(v, bool):
        raise TypeError(f"{name}: expected a size, got {v!r}")
    if isinstance(v, int):
        return v
    if isinstance(v, str):
        m = _SIZE_RE.match(v)
        if m:
            mult = 1024 ** " kmgt".index((m.group(2) or " ").lower())
            return int(float(m.group(1)) * mult)
    raise ValueError(f"{name}: expected a size in bytes (int or '64M'), got {v!r}")


def _make_parents(path):
    """Creates the missing directories above a store about to be made (Store(create=True), or
    bound to a remote), as os.makedirs does and DCP's FileSystemWriter before a save: libckpt
    creates the store's own directory only.  Each new directory's entry is made durable (its
    parent fsynced), as libckpt does for the store's; a directory another process makes at the
    same time (the ranks of a job) is fine."""
    import errno
    import os
    missing = []
    parent = os.path.dirname(os.path.abspath(os.fspath(path)))
    while not os.path.isdir(parent):
        missing.append(parent)
        up = os.path.dirname(parent)
        if up == parent:
            break
        parent = up
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o755)
        except FileExistsError:
            continue
        except OSError as e:
            cls = {errno.EACCES: PermissionDeniedError, errno.EPERM: PermissionDeniedError,
                   errno.EROFS: PermissionDeniedError, errno.ENOSPC: NoSpaceError,
                   errno.ENOTDIR: InvalidArgumentError}.get(e.errno, CkptIOError)
            raise cls(f"store {path}: cannot create directory {d}: {e.strerror}") from None
        fd = os.open(os.path.dirname(d), os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _adopt(path, remote, store_id, create):
    """Store(path, remote=...) where path holds no store: bound to the remote's store (its header
    copied: the same store id), the way back after losing the node. A remote holding no store
    leaves the path to the usual create (or NotFoundError)."""
    import os
    if os.path.exists(os.path.join(str(path), "store")):
        return
    rc = L.load().ckpt_remote_adopt(str(remote).encode(), None if store_id is None
                                    else str(store_id).encode(), str(path).encode())
    if rc == -NotFoundError.code and store_id is None and create:
        return  # an empty remote: a new store, created as usual
    L.check(rc, f"binding {path} to the remote {remote}")


def _meta_dict(metadata):
    """The user's metadata, checked: str keys (the prefix 'libckpt.' is reserved), str values."""
    meta = {}
    for k, v in (metadata or {}).items():
        if not isinstance(k, str) or not k:
            raise TypeError(f"metadata keys must be non-empty strings, got {k!r}")
        if k.startswith("libckpt."):
            raise ValueError(f"metadata key {k!r}: the prefix 'libckpt.' is reserved")
        v = v if isinstance(v, str) else str(v)
        if "\0" in k or "\0" in v:
            raise ValueError(f"metadata {k!r}: keys and values cannot contain NUL characters")
        meta[k] = v
    return meta


class SaveHandle(_driver.SaveHandle):
    """A save in progress (from Store.save_async).

    wait_snapshot(): returns once every tensor has been copied out of the caller's memory; from
    then on the tensors may be modified.  wait(): returns the SaveStats once the checkpoint is
    durable and visible, or raises the save's CkptError.  done(): True once the save finished.
    The handle keeps every tensor of the state (and the contiguous copies made for it) alive until
    the snapshot is done.  Dropping an unfinished handle waits for it (so memory stays valid).
    """

    def __del__(self):
        if getattr(self, "_ptr", None) is not None:
            try:
                self.wait()
            except Exception as e:  # noqa: BLE001
                warnings.warn(f"libckpt: unwaited save of step {self.step} failed: {e}")

    def __repr__(self):
        state = "done" if self._ptr is None else "running"
        return f"<libckpt.SaveHandle step={self.step} {state}>"


class Store:
    """A libckpt store (a directory of checkpoints).

    Store(path, create=False, chunk_size=None, compress=None, zstd_level=None, pool_size=None,
          threads=None, queue_depth=None, io_engine=None, direct_io=None, io_size=None,
          pack_size=None, overwrite=None, data_dirs=None, read_only=False, lock_wait=None,
          remote=None, remote_upload=True, remote_parallel=None, remote_bandwidth=None,
          remote_store_id=None)

    Options left at None keep libckpt's defaults (see include/ckpt.h, CKPT_OPT_*).  Sizes are
    ints or strings like '4M'.  compress: 'none' | 'zstd' (or a bool); io_engine: 'auto' |
    'io_uring' | 'psync'.  A missing store raises NotFoundError unless create=True (a read-only
    store is never created); create=True and remote= create the missing directories above it.

    remote: a second copy off the node (file:///dir or an absolute path on a shared file system,
    s3://bucket/prefix).  With remote_upload (the default) every checkpoint is uploaded in the
    background once durable (remote_parallel transfers at once, at most remote_bandwidth bytes/s);
    upload_state(step) and wait_uploaded() tell when it is there.  A path that holds no store is
    bound to the remote's store (remote_store_id names one when the remote holds several): then
    pull() and load() restore what the lost node saved.

    A store has one writer at a time: one process's saves, prune and gc (or the ranks of one
    multi-rank save) hold its writer lock.  Another writer gets BusyError naming the holder
    (pid, host, what, since when) at once, or, with lock_wait=SECONDS, waits up to that long
    for the lock first.
    """

    def __init__(self, path, *, create=None, chunk_size=None, compress=None, zstd_level=None,
                 pool_size=None, threads=None, queue_depth=None, io_engine=None, direct_io=None,
                 io_size=None, pack_size=None, overwrite=None, data_dirs=None, read_only=False,
                 lock_wait=None, remote=None, remote_upload=True, remote_parallel=None,
                 remote_bandwidth=None, remote_store_id=None):
        lib = L.load()
        self._ptr = None
        self._remote = None  # the ckpt_remote (the store's: ckpt_store_close frees it)
        self._lock = threading.RLock()
        self._inflight = []
        # A missing store is an error unless asked for: a mistyped path on the load side must
        # say "no such store", not create an empty one and then find no checkpoint in it.
        create = bool(create) and not read_only
        opts = lib.ckpt_options_create()
        if not opts:
            raise MemoryError("libckpt: ckpt_options_create failed")
        try:
            def setopt(opt, name, value):
                rc = lib.ckpt_options_set(opts, opt, int(value))
                if rc < 0:
                    raise L.make_error(rc, f"option {name}={value!r}")

            setopt(L.OPT_CREATE, "create", bool(create))
            if read_only:
                setopt(L.OPT_READ_ONLY, "read_only", 1)
            if chunk_size is not None:
                setopt(L.OPT_CHUNK_SIZE, "chunk_size", _size("chunk_size", chunk_size))
            if compress is not None:
                if isinstance(compress, bool):
                    compress = "zstd" if compress else "none"
                if compress not in L.COMPRESS:
                    raise ValueError(f"compress must be 'none' or 'zstd', got {compress!r}")
                setopt(L.OPT_COMPRESS, "compress", L.COMPRESS[compress])
            if zstd_level is not None:
                setopt(L.OPT_ZSTD_LEVEL, "zstd_level", zstd_level)
            if pool_size is not None:
                setopt(L.OPT_POOL_SIZE, "pool_size", _size("pool_size", pool_size))
            if threads is not None:
                setopt(L.OPT_THREADS, "threads", threads)
            if queue_depth is not None:
                setopt(L.OPT_QUEUE_DEPTH, "queue_depth", queue_depth)
            if io_engine is not None:
                if io_engine not in L.ENGINE:
                    raise ValueError(f"io_engine must be one of {sorted(L.ENGINE)}, got {io_engine!r}")
                setopt(L.OPT_IO_ENGINE, "io_engine", L.ENGINE[io_engine])
            if direct_io is not None:
                setopt(L.OPT_DIRECT_IO, "direct_io", bool(direct_io))
            self._io_size = 8 << 20  # libckpt's default (or the nvmetune config's)
            if io_size is not None:
                self._io_size = _size("io_size", io_size)
                setopt(L.OPT_IO_SIZE, "io_size", self._io_size)
            if pack_size is not None:
                setopt(L.OPT_PACK_SIZE, "pack_size", _size("pack_size", pack_size))
            if overwrite is not None:
                setopt(L.OPT_OVERWRITE, "overwrite", bool(overwrite))
            if lock_wait is not None:
                if isinstance(lock_wait, bool) or not lock_wait >= 0:
                    raise ValueError(f"lock_wait must be a number of seconds >= 0, got {lock_wait!r}")
                setopt(L.OPT_LOCK_WAIT_MS, "lock_wait", round(lock_wait * 1000))
            if remote_parallel is not None:
                setopt(L.OPT_REMOTE_PARALLEL, "remote_parallel", remote_parallel)
            if remote_bandwidth is not None:
                setopt(L.OPT_REMOTE_BANDWIDTH, "remote_bandwidth",
                       _size("remote_bandwidth", remote_bandwidth))
            if (create or remote is not None) and not read_only:
                _make_parents(path)
            if remote is not None and not read_only:
                _adopt(path, remote, remote_store_id, create)
            if isinstance(data_dirs, (str, bytes)):
                data_dirs = [data_dirs]
            for d in data_dirs or ():
                L.check(lib.ckpt_options_add_data_dir(opts, str(d).encode()), f"data dir {d!r}")
            out = ctypes.c_void_p()
            rc = lib.ckpt_store_open(str(path).encode(), opts, ctypes.byref(out))
            if rc == -NotFoundError.code and not create:
                raise L.make_error(rc, hint="Store(path, create=True) creates a new store")
            L.check(rc)
            self._ptr = out.value
        finally:
            lib.ckpt_options_free(opts)
        self.path = str(path)
        self.read_only = bool(read_only)
        self.remote = None
        if remote is not None:
            self.set_remote(remote, upload=remote_upload and not read_only)

    # ------------------------------------------------------------------ the remote tier
    def set_remote(self, url, upload=True):
        """Sets the store's remote (file:///dir, an absolute path, s3://bucket/prefix; None: none).
        With upload, every checkpoint is uploaded in the background once it is durable locally
        (never holding the next save), and the local ones the remote lacks at once: an upload
        that was killed resumes. close() cancels the uploads in flight (wait_uploaded first)."""
        lib = L.load()
        if url is None:
            with self._lock:
                rm, self._remote = self._remote, None
                lib.ckpt_remote_close(rm)  # accepts NULL
            self.remote = None
            return
        flags = L.REMOTE_UPLOAD if upload else 0
        out = ctypes.c_void_p()
        with self._lock:
            # a remote already open is closed first (ckpt_remote_open): its handle goes
            self._remote, self.remote = None, None
            L.check(lib.ckpt_remote_open(self._handle(), str(url).encode(), flags,
                                         ctypes.byref(out)), f"remote {url!r}")
            self._remote = out.value
        self.remote = str(url)

    def _rm(self):
        """The store's ckpt_remote, or StateError when it has none."""
        self._handle()
        if self._remote is None:
            raise StateError(f"store {self.path} has no remote (Store(path, remote=URL) or "
                             f"set_remote(URL))", code=StateError.code, name="invalid state")
        return self._remote

    def push(self, step="latest"):
        """Uploads checkpoint `step` to the remote now (only the packs it lacks, the manifest
        last). Returns {"packs_sent", "bytes_sent", "packs_present", "bytes_present"}."""
        st = L.RemoteStats()
        L.check(L.load().ckpt_remote_push(self._rm(), _step_arg(step), ctypes.byref(st),
                                          L.NO_PROGRESS, None), "push")
        return {k: getattr(st, k) for k in L.fields_of(L.RemoteStats)}

    def pull(self, step="latest"):
        """Brings checkpoint `step` (default: the remote's newest) into the local store, every
        record checked against its digest. Returns the step pulled."""
        got = ctypes.c_uint64()
        with self._lock:
            L.check(L.load().ckpt_remote_pull(self._rm(), _step_arg(step), ctypes.byref(got),
                                              None, L.NO_PROGRESS, None), "pull")
        return got.value

    def upload_state(self, step):
        """'local', 'uploading' or 'remote' for checkpoint `step`."""
        rc = L.check(L.load().ckpt_remote_state(self._rm(), _step_arg(step)))
        return L.UPLOAD_STATES[rc]

    def wait_uploaded(self, step="latest", timeout=None):
        """Waits until checkpoint `step` is on the remote ("latest": until no upload is queued),
        at most `timeout` seconds (None: no limit). Raises the upload's error, or BusyError at
        the deadline."""
        ms = -1 if timeout is None else max(0, round(timeout * 1000))
        L.check(L.load().ckpt_remote_wait(self._rm(), _step_arg(step), ms),
                "waiting for the upload")

    def _remote_list(self, include_invalid):
        """The Info dicts of the checkpoints on the remote (ckpt_remote_list), ascending."""
        out = ctypes.POINTER(L.Info)()
        lib = L.load()
        with self._lock:
            n = L.check(lib.ckpt_remote_list(self._rm(), int(bool(include_invalid)),
                                             ctypes.byref(out)))
        try:
            return [L.info_dict(out[i]) for i in range(n)]
        finally:
            lib.ckpt_info_free(out)

    def remote_steps(self):
        """The steps of this store's checkpoints on the remote, ascending."""
        return [i["step"] for i in self._remote_list(False)]

    @staticmethod
    def remote_stores(url):
        """The stores on the remote url, without any local store (what a replacement node can
        bind to: Store(path, remote=url, remote_store_id=...)): a list of dicts with store_id,
        host and path (of the store that pushed last; "" when unrecorded), checkpoints,
        newest_step (None when there is none) and bytes (its packs there), by store_id."""
        lib = L.load()
        out = ctypes.POINTER(L.RemoteStore)()
        n = L.check(lib.ckpt_remote_stores(str(url).encode(), ctypes.byref(out)),
                    f"listing the stores on {url}")
        try:
            return [{"store_id": out[i].id.decode(), "host": out[i].host.decode(errors="replace"),
                     "path": out[i].path.decode(errors="replace"),
                     "checkpoints": out[i].checkpoints,
                     "newest_step": out[i].newest_step if out[i].checkpoints else None,
                     "bytes": out[i].bytes} for i in range(n)]
        finally:
            lib.ckpt_remote_stores_free(out)

    # ------------------------------------------------------------------ lifecycle
    def _handle(self):
        if self._ptr is None:
            raise ValueError("libckpt: operation on a closed Store")
        return self._ptr

    def _forget(self, h):
        with self._lock:
            self._inflight = [r for r in self._inflight if r() is not None and r() is not h]

    def close(self):
        """Waits for the saves still in flight, then closes the store. Raises the first save error."""
        first = None
        with self._lock:
            pending = [r() for r in self._inflight]
        for h in pending:
            if h is None:
                continue
            try:
                h.wait()
            except CkptError as e:
                first = first or e
        with self._lock:
            if self._ptr is not None:
                L.load().ckpt_store_close(self._ptr)  # its remote too
                self._ptr = self._remote = None
            self._inflight = []
        if first is not None:
            raise first

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            self.close()
        except CkptError:
            if exc_type is None:
                raise

    def __del__(self):
        if getattr(self, "_ptr", None) is not None:
            try:
                self.close()
            except Exception:  # noqa: BLE001
                pass

    def __repr__(self):
        return f"<libckpt.Store {self.path!r}{' closed' if self._ptr is None else ''}>"

    # ------------------------------------------------------------------ saving
    def reserve(self, size=None):
        """Allocates and pins the staging pool now, so that the first save does not pay for it.

        size: bytes (an int or a string like '4G'), or a state (what save() takes), whose tensor
        bytes plus two I/O buffers make the pool: the snapshot then runs at memory speed, at the
        cost of pinned memory the size of the state.  None: the store's pool_size.  A pool at
        least that large is kept; returns the pool's size in bytes as the next save reports it.
        """
        lib = L.load()
        if size is None:
            want = 0
        elif isinstance(size, (int, str)) and not isinstance(size, bool):
            want = _size("size", size)
        else:
            # the leaves as a save takes them: a DTensor or Shard counts its local tensor (a
            # plain flatten sees it as an object of no tensor bytes, and the pool fell back to
            # pool_size: the snapshot of an FSDP2 state then waited for the disk)
            _, leaves = T.flatten(size, leaf_hook=_dist._leaf_hook)
            # records carry a 4 KiB header per 1 MiB chunk; two I/O buffers keep the disk busy
            data = sum(lf.nbytes for lf in leaves)
            want = data + data // 256 + 2 * (self._io_size + 4096) + (1 << 20)
        with self._lock:
            L.check(lib.ckpt_store_reserve(self._handle(), want), "reserve")
        return want

    def save_async(self, state, step, metadata=None, group=None, tags=None, _binding_meta=None):
        """Starts saving `state` as checkpoint `step` and returns a SaveHandle at once.

        CPU tensors and arrays must not be modified before handle.wait_snapshot() returns.  For
        CUDA tensors the copies are ordered after the work queued so far on torch's current
        stream, and that stream waits for the snapshot (the next optimizer step cannot overwrite
        a tensor before it is copied) without blocking the CPU.

        group: a torch.distributed process group (None: the default group when one is
        initialized): a collective multi-rank save (libckpt.dist); libckpt.LOCAL: this process
        alone.  tags: labels of the checkpoint (a str or a list of str; restic's --tag): shown by
        list()/info() and `ckptctl list`, kept by prune(keep_tags=) and `ckptctl prune
        --keep-tag`.  A tag is 1 to 64 printable ASCII characters other than space and ','
        (InvalidArgumentError otherwise, before anything is saved).  _binding_meta: the
        binding's own keys ('libckpt.' prefix), added unchecked (CheckpointManager's metrics
        and save time).
        """
        t0 = time.perf_counter()
        step = _step_arg(step, allow_latest=False)
        user_meta = _meta_dict(metadata)
        user_meta.update(_binding_meta or {})
        tags = L.tag_list(tags, f"checkpoint {step}")
        dg = _dist.resolve_group(group)
        if dg is not None:
            return _dsave.save_async(self, state, step, user_meta, dg, tags=tags)
        self._dist_wait()
        tree, leaves = T.flatten(state)
        meta = T.binding_meta(tree)
        meta.update(user_meta)
        with self._lock:
            drv = SaveDriver(self, step)
            drv.keep.append(leaves)  # the tensors and the contiguous copies made for them
            ok = False
            try:
                for lf in leaves:
                    drv.add(lf.name, lf.dtype, lf.shape, lf.mem, lf.ptr)
                for k, v in meta.items():
                    drv.set_meta(k, v)
                for t in tags:
                    drv.add_tag(t)
                drv.order_after([lf.mem for lf in leaves])
                L.check(drv.submit())
                ok = True
            finally:
                if not ok:
                    drv.abort()
            h = SaveHandle(self, drv, t0)
            self._inflight.append(weakref.ref(h))
        err = drv.fence()
        if err is not None:
            try:
                h.wait()
            except CkptError:
                pass
            raise err
        return h

    def save(self, state, step, metadata=None, group=None, tags=None):
        """Saves `state` as checkpoint `step`; returns SaveStats once it is durable and visible.
        group, tags: as save_async (a multi-rank save returns this rank's part's SaveStats once
        the global checkpoint is durable, or raises on every rank)."""
        dg = _dist.resolve_group(group)
        if dg is not None:
            step = _step_arg(step, allow_latest=False)
            return _dsave.save_async(self, state, step, _meta_dict(metadata), dg,
                                     background=False, tags=L.tag_list(tags)).wait()
        return self.save_async(state, step, metadata, group=_dist.LOCAL, tags=tags).wait()

    def _dist_started(self, h):
        """A multi-rank save in flight: close() waits for it, the next multi-rank call too."""
        with self._lock:
            self._inflight.append(weakref.ref(h))
        self._dist_pending = h

    def _dist_wait(self):
        """Waits (without raising: its wait() does) for the multi-rank save still committing, so
        that this process's collectives on libckpt's group stay in program order."""
        h = getattr(self, "_dist_pending", None)
        if h is not None:
            h.join()
            self._dist_pending = None

    # ------------------------------------------------------------------ reading
    def _open_reader(self, step, as_saved=True):
        """A Reader of checkpoint step: of its tensors as saved (a multi-rank checkpoint's
        pieces, as `ckptctl show` lists them), or with as_saved=False of its global tensors."""
        return ReadDriver(self, _step_arg(step), as_saved=as_saved)

    @contextlib.contextmanager
    def _open_checkpoint(self, step, boxes=False):
        """For load and restore: (reader, view) of checkpoint step from ONE open of a reader of
        its global tensors; view is that reader too when it was saved by several ranks or boxes
        (Shard targets) need one, else None.  'latest' is resolved by that open: opening again
        by the step it resolved to could find it pruned meanwhile (a reader keeps its packs, not
        its manifest)."""
        s = _step_arg(step)
        with ReadDriver(self, s) as r:
            if s == L.STEP_LATEST:
                self._warn_damaged_newer(r.step)
            yield r, (r if boxes or r.multi_rank() else None)

    def _newer_steps(self, step):
        """The steps above `step` that the store's manifests/ lists (names only, nothing
        opened), and the damaged ones above it that its remote lists (ckpt_remote_list decodes
        the remote's manifests: the public API has no listing by name)."""
        local, remote = set(), set()
        try:
            names = os.listdir(os.path.join(self.path, "manifests"))
        except OSError:
            names = []
        for n in names:  # manifests/<20 digits>.ckpt (docs/format.md)
            if len(n) == 25 and n.endswith(".ckpt") and n[:20].isdigit() and int(n[:20]) > step:
                local.add(int(n[:20]))
        if self._remote is not None:
            try:
                remote.update(i["step"] for i in self._remote_list(True)
                              if i["step"] > step and i["error"])
            except CkptError:
                pass  # an unreachable remote: nothing to warn about from it
        return local, remote

    def _warn_damaged_newer(self, step):
        """"latest" is the newest checkpoint that reads (here `step`): warns about each newer one
        it passed over, local or on the remote, with the library's message naming its manifest
        (as ckptctl list, verify and pull report them). Only when a newer step is listed locally
        are the local manifests decoded (a newer one that decodes was committed meanwhile: not
        reported), and only a damaged one is opened, for its message."""
        local, damaged = self._newer_steps(step)
        if local:
            damaged.update(i["step"] for i in self.list(include_invalid=True)
                           if i["error"] and i["step"] in local)
        for n in sorted(damaged):
            try:
                with self._open_reader(n):
                    pass
            except (CorruptError, VersionError) as e:  # ChecksumError is a CorruptError
                warnings.warn(f"libckpt: checkpoint {n} is damaged, read checkpoint {step} (the "
                              f"newest intact) instead: {e}", R.DamagedCheckpointWarning,
                              stacklevel=5)
            except CkptError:
                pass

    def list(self, include_invalid=False):
        """The checkpoints in ascending step order, as dicts: step, time, tensors, logical_bytes,
        new_bytes, stored_bytes, chunks, new_chunks, error (0, or a CKPT_E_* code), tags (a list
        of str, in the order added)."""
        lib = L.load()
        arr = ctypes.POINTER(L.Info)()
        with self._lock:
            n = L.check(lib.ckpt_store_list(self._handle(), int(bool(include_invalid)),
                                            ctypes.byref(arr)), "list")
        try:
            return [L.info_dict(arr[i]) for i in range(n)]
        finally:
            lib.ckpt_info_free(arr)

    def steps(self):
        return [i["step"] for i in self.list()]

    def latest_step(self):
        """The newest valid checkpoint's step, or None when the store has none."""
        out = ctypes.c_uint64()
        with self._lock:
            rc = L.load().ckpt_store_resolve(self._handle(), L.STEP_LATEST, ctypes.byref(out))
        if rc == -NotFoundError.code:
            return None
        L.check(rc, "latest checkpoint")
        return out.value

    def info(self, step="latest"):
        """Summary of one checkpoint (as list() gives it)."""
        with self._open_reader(step) as r:
            return r.info()

    def metadata(self, step="latest"):
        """The user metadata of a checkpoint (str -> str), without the binding's own keys (nor
        libckpt's reserved ones: ckpt.dist.*, and ckpt.tags, which info()["tags"] gives)."""
        with self._open_reader(step) as r:
            return {k: v for k, v in r.meta().items()
                    if not k.startswith(("libckpt.", "ckpt.dist.")) and k != "ckpt.tags"}

    def tensors(self, step="latest"):
        """Descriptions of a checkpoint's tensors: name, dtype, shape, nbytes, chunks, chunks_new,
        bytes_new.  Names are dotted paths ("model.fc1.weight"), also those of a checkpoint that
        an older binding saved with escaped keys ("model.fc1%2Eweight")."""
        with self._open_reader(step) as r:
            old = r.old_names()
            return [dict(ti, name=T.old_dotted(ti["name"])) if old else ti
                    for ti in (r.tensor(i) for i in range(r.count()))]

    def verify(self, step="latest"):
        """Re-hashes every chunk of a checkpoint (and a multi-rank checkpoint's part files);
        returns the list of damages (empty: intact)."""
        with self._open_reader(step) as r:
            return r.verify()

    def du(self):
        """Space accounting (needs no lock): a dict with one entry per valid checkpoint
        (`checkpoints`: step, referenced_bytes, exclusive_bytes, shared_bytes) and the store's
        totals (packs, pack_bytes, live_bytes, garbage_bytes, ...)."""
        lib = L.load()
        out = ctypes.POINTER(L.Du)()
        with self._lock:
            L.check(lib.ckpt_store_du(self._handle(), ctypes.byref(out)))
        try:
            d = out.contents
            res = {name: getattr(d, name) for name in L.fields_of(L.Du)
                   if name not in ("n", "entries")}
            res["checkpoints"] = [{name: getattr(d.entries[i], name)
                                   for name in L.fields_of(L.DuEntry)} for i in range(d.n)]
            return res
        finally:
            lib.ckpt_du_free(out)

    @staticmethod
    def _report(lib, rep):
        """A ckpt_report as a dict (its counts, steps_removed; the texts as str or None), freed."""
        if not rep:
            return {}
        try:
            r = rep.contents
            d = {}
            for name in L.fields_of(L.Report):
                if name in ("steps_removed", "n_steps_removed", "choices", "n_choices"):
                    continue
                v = getattr(r, name)
                d[name] = v.decode(errors="replace") if isinstance(v, bytes) else v
            d["steps_removed"] = [r.steps_removed[i] for i in range(r.n_steps_removed)]
            return d
        finally:
            lib.ckpt_report_free(rep)

    def prune(self, keep_last=1, keep_every=0, keep_steps=(), dry_run=False, force=False,
              keep_tags=(), keep_within=0, keep_hourly=0, keep_daily=0, keep_weekly=0,
              keep_monthly=0, keep_yearly=0):
        """Removes the checkpoints the policy does not keep, then the packs nothing references
        (ckpt_store_prune): keep the newest `keep_last` (at least the newest one), every step
        that is a multiple of `keep_every`, `keep_steps`, every checkpoint with one of
        `keep_tags` (restic's --keep-tag), those saved less than `keep_within` seconds ago, and
        the newest of each of the last keep_hourly/daily/weekly/monthly/yearly periods (UTC)
        that have one (borg prune's rules; `ckptctl prune --help`).  Returns the report as a
        dict (steps_removed, bytes_freed, ...).  Takes the writer lock (BusyError).  dry_run:
        report only."""
        lib = L.load()
        keep_steps = [int(x) for x in keep_steps]
        flags = (L.GC_DRY_RUN if dry_run else 0) | (L.GC_FORCE if force else 0)
        rep = ctypes.POINTER(L.Report)()
        tags = L.tag_list(keep_tags, "keep_tags") if keep_tags else []
        timed = (keep_within, keep_hourly, keep_daily, keep_weekly, keep_monthly, keep_yearly)
        for name, v in zip(("keep_within", "keep_hourly", "keep_daily", "keep_weekly",
                            "keep_monthly", "keep_yearly"), timed):
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise InvalidArgumentError(f"prune: {name} must be a whole number >= 0, got {v!r}")
        tarr = (ctypes.c_char_p * max(1, len(tags)))(*[t.encode() for t in tags])
        ret = L.Retention(keep_last=keep_last, keep_every=keep_every, keep_steps=L.u64s(keep_steps),
                          n_keep_steps=len(keep_steps), keep_within=keep_within,
                          keep_hourly=keep_hourly, keep_daily=keep_daily,
                          keep_weekly=keep_weekly, keep_monthly=keep_monthly,
                          keep_yearly=keep_yearly, keep_tags=tarr, n_keep_tags=len(tags))
        with self._lock:
            L.check(lib.ckpt_store_prune(self._handle(), ctypes.byref(ret), None, flags,
                                         ctypes.byref(rep)))
        return self._report(lib, rep)

    def delete(self, steps, newest=False):
        """Removes the checkpoints of `steps` (a step or steps), then the packs nothing references
        (ckpt_store_delete), all or nothing: NotFoundError for a step without a checkpoint,
        InvalidArgumentError for the newest valid checkpoint unless newest=True.  Returns the
        report as prune does.  Takes the writer lock (BusyError)."""
        lib = L.load()
        steps = [_step_arg(s, allow_latest=False) for s in
                 ((steps,) if isinstance(steps, int) else steps)]
        rep = ctypes.POINTER(L.Report)()
        with self._lock:
            L.check(lib.ckpt_store_delete(self._handle(), L.u64s(steps), len(steps), None,
                                          L.GC_NEWEST if newest else 0, ctypes.byref(rep)),
                    "delete")
        return self._report(lib, rep)

    def gc(self, compact_below=0.0, dry_run=False, force=False):
        """Removes unreferenced packs and leftovers of interrupted saves, and compacts packs whose
        live share is below `compact_below` (0 to 1; 0: no compaction) (ckpt_store_gc).
        Returns the report as a dict."""
        lib = L.load()
        flags = (L.GC_DRY_RUN if dry_run else 0) | (L.GC_FORCE if force else 0)
        rep = ctypes.POINTER(L.Report)()
        # compaction by live share only (max_unused 1: no limit), as this call always did
        pol = L.GcPolicy(compact_below=float(compact_below), max_unused=1.0)
        with self._lock:
            L.check(lib.ckpt_store_gc(self._handle(), ctypes.byref(pol), flags,
                                      ctypes.byref(rep)))
        return self._report(lib, rep)

    def load(self, step="latest", device=None, keys=None, map_location=None):
        """Returns the checkpoint's state as new tensors: the nested structure that was saved,
        with torch tensors for saved torch tensors (on the CPU, or on `device`) and numpy arrays
        for saved numpy arrays.  A checkpoint written by other tools gives {name: tensor}.

        keys: a dotted prefix or a list of them ('model', 'optim.state.3'): only the entries
        under them are read (dict entries outside are left out, list items outside are None);
        NotFoundError for a prefix that names nothing.  map_location, as in torch.load: a
        device or string, a dict {saved location: location} ('cuda:1' -> 'cuda:0'; CPU
        tensors are saved as 'cpu'), or a callable(tensor, saved location) -> tensor."""
        if device is not None and map_location is not None:
            raise ValueError("load: give device or map_location, not both")
        pres = S.prefixes(keys) if keys is not None else None
        with self._open_checkpoint(step) as (r, v):
            if v is not None:  # saved by several ranks: each Shard leaf comes back as its global tensor
                return _dread.load(r, v, device, keys, map_location)
            tree = r.tree()
            targets = []
            cache = {}
            locs = {}

            def tensor_for(kind, name, saved="cpu"):
                if name in cache:  # saved once for several entries: they share it again
                    return cache[name]
                idx = r.find(name)
                ti = r.tensor(idx)
                dev = S.location(map_location, device, saved) if kind == "torch" else None
                obj = _alloc(kind, ti, dev)
                targets.append((idx, ti, obj))
                cache[name] = obj
                locs[id(obj)] = saved
                return obj

            if tree is None:
                try:
                    import torch  # noqa: F401
                    kind = "torch"
                except ImportError:
                    kind = "numpy"
                names = list(r.names())
                if pres is not None:
                    names = S.select_flat(names, pres)
                state = {n: tensor_for(kind, n) for n in names}
            else:
                state = T.build(tree if pres is None else S.select(tree, pres), tensor_for)
            _restore_into(r, targets)
        if map_location is not None and S.location(map_location, None, "cpu") is None:
            state = S.apply_callable(state, map_location, locs)
        return state

    def get_slice(self, name, step="latest"):
        """A lazy handle on one saved tensor, as safetensors' get_slice: .shape, .dtype, and
        indexing on the first dimension ([a:b], [i], [a:b, ...]) reads only the chunks that hold
        those rows (ckpt_reader_read of an element range: the chunks under it, of every piece
        for a global tensor of a multi-rank checkpoint).  `name`: the tensor's dotted name (store.tensors():
        "model.fc1.weight"), a global tensor's name in a multi-rank checkpoint, or a name as
        stored."""
        with self._open_checkpoint(step) as (r, v):
            tree = r.tree()
            old = r.old_names()
            if v is None:
                stored = S.resolve(name, r.names(), old, r.step)
                glob, ti = False, None
            else:
                with self._open_reader(r.step) as p:  # the pieces as saved
                    pieces = p.names()
                    if name not in pieces:
                        # the global tensors (a sharded one is stored as NAME@RANK; a
                        # replicated one is in both lists, counted once)
                        stored = S.resolve(name, dict.fromkeys([*v.names(), *pieces]), old,
                                           r.step)
                    else:
                        stored = S.resolve(name, pieces, old, r.step)
                    glob = stored in v.names() and stored not in pieces
                    ti = None if glob else p.tensor(p.find(stored))
            if ti is None:
                ti = r.tensor(r.find(stored))
            kind = T.kind_of(tree, stored) if tree is not None else None
            return TensorSlice(self, r.step, stored, ti, kind or ("torch" if _has_torch() else "numpy"),
                               glob)

    def restore(self, state, step="latest", strict=True, group=None, share_replicated=True):
        """Restores `state` from a checkpoint; returns its step (a RestoreResult: an int with
        .not_restored, the names of the saved entries left out).

        Tensors of `state` are filled in place: each must exist in the checkpoint with the same
        shape and dtype (NotFoundError, MismatchError otherwise).  Objects with state_dict() and
        load_state_dict() (modules, optimizers, schedulers) get load_state_dict(saved state),
        so a freshly built optimizer resumes with its saved moments.  Non-tensor values in dicts
        and lists are replaced by the saved values.  strict=True: the checkpoint may hold no
        entry that `state` lacks (MismatchError); strict=False restores the rest, warns
        (PartialRestoreWarning) and returns the names left out.  Every check runs before
        anything is written.

        group: as save (None: the default group when one is initialized; libckpt.LOCAL: this
        process alone): every rank restores the same checkpoint and raises when any rank fails.
        libckpt.Shard targets (and DTensors) are filled with their box of the saved global
        tensor, whatever the split and world size of the save; other tensors with the whole
        global tensor.  share_replicated (with a group): an entry that every rank of a node
        restores whole (a replicated tensor, a DTensor with Replicate placements) is read and
        verified by one rank of the node, the node's entries spread over its ranks, and
        broadcast to the others (gloo, through host memory); a read that fails raises on every
        rank.  False: every rank reads all it restores.  The result's .stats says what this
        rank read (bytes_read, bytes_read_per_rank, bytes_received).
        """
        dg = _dist.resolve_group(group)
        if dg is not None:
            return _dread.restore(self, state, step, strict, dg, share_replicated)
        with self._open_checkpoint(step, boxes=_dist.holds_boxes(state)) as (r, v):
            if v is not None:
                return _dread.restore_local(r, v, state, strict)
            tree = r.tree()
            plan = R.Plan(r, lambda kind, ti: _alloc(kind, ti, None), strict)
            R.merge(state, R.NOTREE if tree is None else tree, [], plan, apply=False)
            targets = []
            for name, obj in plan.found:
                idx = r.find(name)
                ti = r.tensor(idx)
                _check_target(name, ti, obj, r.step)
                targets.append((idx, ti, obj))
            if tree is None:
                # another tool's checkpoint: every tensor not restored is left out
                used = {n for n, _ in plan.found} | {ti["name"] for _, ti, _ in plan.fresh}
                plan.dropped += [n for n in r.names() if n not in used]
            dropped = R.finish(plan, strict, r.step)
            _restore_into(r, targets + plan.fresh)
            R.load_stateful(plan, strict)
            if tree is not None:
                R.merge(state, tree, [], plan, apply=True)
            return R.RestoreResult(r.step, dropped)


def _has_torch():
    try:
        import torch  # noqa: F401
        return True
    except ImportError:
        return False


class TensorSlice:
    """One saved tensor, read in parts (Store.get_slice)."""

    def __init__(self, store, step, name, info, kind, glob=False):
        self._store, self.step, self.name, self._ti, self.kind = store, step, name, info, kind
        self._glob = glob  # a global tensor of a multi-rank checkpoint, read by boxes
        self.shape = tuple(info["shape"])
        self.dtype = info["dtype"]

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __repr__(self):
        return f"<libckpt.TensorSlice {self.name!r} {self.dtype} {list(self.shape)} step {self.step}>"

    def _read(self, a, b):
        """Rows [a, b) as a new tensor (the whole tensor for a 0-d one)."""
        rows = self.shape[1:] if self.shape else ()
        shape = (b - a,) + rows if self.shape else ()
        obj = _alloc(self.kind, dict(self._ti, shape=shape), None)
        row_bytes = self._ti["nbytes"] // self.shape[0] if self.shape and self.shape[0] else 0
        size = (b - a) * row_bytes if self.shape else self._ti["nbytes"]
        if size:
            # rows [a, b) are the elements [a * row, b * row) of the row-major tensor
            es = L.dtype_size(self._ti["ckpt_dtype"])
            g = region(offset=a * row_bytes // es, count=size // es) if self.shape else None
            with self._store._open_reader(self.step, as_saved=not self._glob) as r:
                r.read(r.find(self.name), _data_ptr(obj), size, g)
        return obj

    def __getitem__(self, key):
        first, rest = (key[0], key[1:]) if isinstance(key, tuple) and key else (key, ())
        if not self.shape or not isinstance(first, (int, slice)) or isinstance(first, bool):
            return self._read(0, self.shape[0] if self.shape else 0)[key]  # read it all
        n = self.shape[0]
        if isinstance(first, int):
            i = first + n if first < 0 else first
            if not 0 <= i < n:
                raise IndexError(f"index {first} is out of range for {self.name!r} of {n} rows")
            out = self._read(i, i + 1)[0]
            return out[rest] if rest else out
        rows = range(*first.indices(n))
        if not rows:
            out = self._read(0, 0)
        else:
            a, b = min(rows), max(rows) + 1
            out = self._read(a, b)
            if rows.step > 1:
                out = out[::rows.step]
            elif rows.step < 0:
                out = out[[r - a for r in rows]]  # rows in reverse: a copy, as torch makes one
        return out[(slice(None),) + rest] if rest else out


def _restore_into(r, targets):
    """Restores (index, info, object) targets through ckpt_reader_read_all, in parallel.

    Contiguous CPU tensors/arrays are filled directly; CUDA tensors directly on the device when
    libckpt's CUDA provider is loaded, else through a pinned host buffer; non-contiguous targets
    through a contiguous temporary copied back afterwards."""
    if not targets:
        return
    torch = T.torch_mod()
    cuda_devs = {o.device.index for _, _, o in targets
                 if T.is_torch_tensor(o) and o.device.type == "cuda"}
    r.order_after(cuda_devs)  # pending work on the targets runs first

    def plan(stage_cuda):
        dst, copies, keep, first = {}, [], [], {}
        for idx, ti, obj in targets:
            if ti["nbytes"] == 0:
                continue
            if idx in first:
                # a tensor saved once for several entries (tied weights): read once, copied to
                # the other targets unless they are the same memory
                if _data_ptr(obj) != _data_ptr(first[idx]):
                    copies.append((obj, first[idx]))
                continue
            first[idx] = obj
            if T.is_torch_tensor(obj):
                t = obj.detach()
                on_cuda = t.device.type == "cuda"
                if on_cuda and stage_cuda:
                    buf = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
                    copies.append((t, buf))
                elif not t.is_contiguous():
                    buf = torch.empty(t.shape, dtype=t.dtype, device=t.device)
                    copies.append((t, buf))
                else:
                    buf = t
                keep.append(buf)
                dst[idx] = (buf.data_ptr(), buf.device.index if buf.device.type == "cuda" else L.MEM_HOST)
            else:
                import numpy as np
                buf = obj if obj.flags.c_contiguous and obj.dtype.isnative else np.empty(obj.shape, obj.dtype.newbyteorder("="))
                if buf is not obj:
                    copies.append((obj, buf))
                keep.append(buf)
                dst[idx] = (buf.__array_interface__["data"][0], L.MEM_HOST)
        return dst, copies, keep

    def run(dst):
        r.read_all(dst.get)

    dst, copies, keep = plan(stage_cuda=False)
    try:
        run(dst)
    except UnsupportedError:
        if not cuda_devs:
            raise
        dst, copies, keep = plan(stage_cuda=True)  # no CUDA provider in libckpt: stage on the host
        run(dst)
    for obj, buf in copies:
        if T.is_torch_tensor(obj):
            with torch.no_grad():
                obj.copy_(torch.as_tensor(buf))
        else:
            import numpy as np
            np.copyto(obj, buf.cpu().numpy() if T.is_torch_tensor(buf) else buf)
    for d in cuda_devs:
        torch.cuda.current_stream(d).synchronize()
