"""Loading libckpt.so and declaring its C interface (include/ckpt.h) for ctypes."""

import ctypes
import ctypes.util
import os
import sysconfig
import threading
from pathlib import Path

from .errors import CkptError, LibraryNotFoundError, VersionError, error_class

SONAME = "libckpt.so.0"
STEP_LATEST = 2**64 - 1
MEM_HOST = -1
MAX_DIMS = 32

# dtypes (ckpt_dtype)
BOOL, U8, I8, F8_E5M2, F8_E4M3, I16, U16, F16, BF16, I32, U32, F32, F64, I64, U64 = range(1, 16)

# options (ckpt_option)
OPT_CREATE, OPT_CHUNK_SIZE, OPT_COMPRESS, OPT_ZSTD_LEVEL, OPT_READ_ONLY, OPT_DIRECT_IO, \
    OPT_IO_SIZE, OPT_OVERWRITE, OPT_PACK_SIZE, OPT_THREADS, OPT_POOL_SIZE, OPT_QUEUE_DEPTH, \
    OPT_IO_ENGINE, OPT_LOCK_WAIT_MS = range(1, 15)
OPT_REMOTE_PARALLEL, OPT_REMOTE_BANDWIDTH = 16, 17
REMOTE_UPLOAD = 1  # ckpt_store_set_remote flag
UPLOAD_STATES = {0: "local", 1: "uploading", 2: "remote"}  # ckpt_store_upload_state
COMPRESS = {"none": 0, "zstd": 1}
ENGINE = {"auto": 0, "io_uring": 1, "psync": 2}

u64 = ctypes.c_uint64
vp = ctypes.c_void_p
cp = ctypes.c_char_p
ci = ctypes.c_int


class Info(ctypes.Structure):
    _fields_ = [("step", u64), ("time", ctypes.c_int64), ("tensors", u64), ("logical_bytes", u64),
                ("new_bytes", u64), ("stored_bytes", u64), ("chunks", u64), ("new_chunks", u64),
                ("error", ci), ("tags", cp)]


class RemoteStore(ctypes.Structure):
    _fields_ = [("id", ctypes.c_char * 33), ("host", cp), ("path", cp), ("checkpoints", u64),
                ("newest_step", u64), ("bytes", u64)]


class RemoteStats(ctypes.Structure):
    _fields_ = [("packs_sent", ctypes.c_uint64), ("bytes_sent", ctypes.c_uint64),
                ("packs_present", ctypes.c_uint64), ("bytes_present", ctypes.c_uint64)]


class Stats(ctypes.Structure):
    _fields_ = [("step", u64), ("tensors", u64), ("logical_bytes", u64), ("chunks", u64),
                ("chunks_new", u64), ("chunks_reused", u64), ("bytes_hashed", u64),
                ("bytes_stored", u64), ("bytes_written", u64), ("bytes_read", u64),
                ("seconds", ctypes.c_double), ("snapshot_seconds", ctypes.c_double),
                ("persist_seconds", ctypes.c_double), ("wait_seconds", ctypes.c_double),
                ("pool_bytes", u64), ("pool_peak", u64), ("threads", ctypes.c_uint32),
                ("data_dirs", ctypes.c_uint32), ("direct_io", ci),
                ("engine", ctypes.c_char * 16), ("gpu", ctypes.c_char * 16)]


class TensorInfo(ctypes.Structure):
    _fields_ = [("name", cp), ("dtype", ci), ("ndim", ctypes.c_uint), ("shape", ctypes.POINTER(u64)),
                ("nbytes", u64), ("chunks", u64), ("chunks_new", u64), ("bytes_new", u64)]


class Damage(ctypes.Structure):
    _fields_ = [("step", u64), ("tensor", cp), ("chunk", u64), ("offset", u64), ("file", cp),
                ("error", ci), ("message", cp)]


class DuEntry(ctypes.Structure):
    _fields_ = [("step", u64), ("referenced_bytes", u64), ("exclusive_bytes", u64),
                ("shared_bytes", u64)]


class Du(ctypes.Structure):
    _fields_ = [("n", ctypes.c_size_t), ("entries", ctypes.POINTER(DuEntry)),
                ("invalid_manifests", ctypes.c_size_t), ("packs", u64), ("pack_bytes", u64),
                ("live_bytes", u64), ("garbage_bytes", u64), ("unreferenced_pack_bytes", u64),
                ("dead_record_bytes", u64), ("leftover_bytes", u64), ("manifest_bytes", u64)]


class GcReport(ctypes.Structure):
    _fields_ = [("steps_removed", ctypes.POINTER(u64)), ("n_steps_removed", ctypes.c_size_t),
                ("packs_removed", u64), ("packs_compacted", u64), ("manifests_rewritten", u64),
                ("leftovers_removed", u64), ("bytes_freed", u64), ("bytes_copied", u64)]


class PrunePolicy(ctypes.Structure):
    _fields_ = [("keep_last", u64), ("keep_every", u64), ("keep_steps", ctypes.POINTER(u64)),
                ("n_keep_steps", ctypes.c_size_t)]


class Retention(ctypes.Structure):
    """ckpt_retention: PrunePolicy plus borg's time rules and restic's keep-tag."""
    _fields_ = [("keep", PrunePolicy), ("now", ctypes.c_int64), ("keep_within", ctypes.c_int64),
                ("keep_hourly", u64), ("keep_daily", u64), ("keep_weekly", u64),
                ("keep_monthly", u64), ("keep_yearly", u64),
                ("keep_tags", ctypes.POINTER(cp)), ("n_keep_tags", ctypes.c_size_t)]


GC_DRY_RUN = 1
GC_FORCE = 2

DST_FN = ctypes.CFUNCTYPE(vp, ctypes.c_size_t, ctypes.POINTER(TensorInfo), ctypes.POINTER(ci), vp)
DAMAGE_FN = ctypes.CFUNCTYPE(None, ctypes.POINTER(Damage), vp)
PROGRESS_FN = ctypes.CFUNCTYPE(None, u64, u64, vp)

P = ctypes.POINTER
_PROTOS = {
    "ckpt_version": (cp, []),
    "ckpt_strerror": (cp, [ci]),
    "ckpt_errmsg": (cp, []),
    "ckpt_dtype_size": (ctypes.c_size_t, [ci]),
    "ckpt_dtype_name": (cp, [ci]),
    "ckpt_dtype_from_name": (ci, [cp]),
    "ckpt_options_create": (vp, []),
    "ckpt_options_free": (None, [vp]),
    "ckpt_options_set": (ci, [vp, ci, ctypes.c_int64]),
    "ckpt_options_add_data_dir": (ci, [vp, cp]),
    "ckpt_store_open": (ci, [cp, vp, P(vp)]),
    "ckpt_store_close": (None, [vp]),
    "ckpt_store_reserve": (ci, [vp, u64]),
    "ckpt_store_path": (cp, [vp]),
    "ckpt_store_list": (ci, [vp, ci, P(P(Info))]),
    "ckpt_info_free": (None, [P(Info)]),
    "ckpt_store_resolve": (ci, [vp, u64, P(u64)]),
    "ckpt_save_begin": (ci, [vp, u64, P(vp)]),
    "ckpt_save_add_tensor": (ci, [vp, cp, ci, ctypes.c_uint, P(u64), ci, vp]),
    "ckpt_save_set_meta": (ci, [vp, cp, cp]),
    "ckpt_save_commit": (ci, [vp, P(Stats)]),
    "ckpt_save_abort": (None, [vp]),
    "ckpt_save_after_stream": (ci, [vp, vp]),
    "ckpt_save_submit": (ci, [vp]),
    "ckpt_save_wait_snapshot": (ci, [vp]),
    "ckpt_save_fence": (ci, [vp, vp]),
    "ckpt_save_poll": (ci, [vp]),
    "ckpt_save_wait": (ci, [vp, P(Stats)]),
    "ckpt_reader_open": (ci, [vp, u64, P(vp)]),
    "ckpt_reader_close": (None, [vp]),
    "ckpt_reader_info": (None, [vp, P(Info)]),
    "ckpt_reader_tensor_count": (ctypes.c_size_t, [vp]),
    "ckpt_reader_tensor": (ci, [vp, ctypes.c_size_t, P(TensorInfo)]),
    "ckpt_reader_find": (ctypes.c_long, [vp, cp]),
    "ckpt_reader_meta_count": (ctypes.c_size_t, [vp]),
    "ckpt_reader_meta": (ci, [vp, ctypes.c_size_t, P(cp), P(cp)]),
    "ckpt_reader_get_meta": (cp, [vp, cp]),
    "ckpt_reader_restore": (ci, [vp, ctypes.c_size_t, ci, vp, u64]),
    "ckpt_reader_restore_all": (ci, [vp, DST_FN, vp]),
    "ckpt_reader_stats": (None, [vp, P(Stats)]),
    "ckpt_reader_verify": (ctypes.c_long, [vp, DAMAGE_FN, PROGRESS_FN, vp]),
}

# Newer functions: bound when the loaded library has them (has(name) says).
_OPTIONAL = {
    "ckpt_store_du": (ci, [vp, P(P(Du))]),
    "ckpt_du_free": (None, [P(Du)]),
    "ckpt_store_prune": (ci, [vp, P(PrunePolicy), ci, P(P(GcReport))]),
    "ckpt_store_gc": (ci, [vp, ctypes.c_double, ci, P(P(GcReport))]),
    "ckpt_gc_report_free": (None, [P(GcReport)]),
    "ckpt_reader_restore_range": (ci, [vp, ctypes.c_size_t, u64, vp, u64]),
    "ckpt_dist_reader_checkpoint": (vp, [vp]),
    "ckpt_reader_after_stream": (ci, [vp, vp]),
    "ckpt_save_add_tag": (ci, [vp, cp]),
    "ckpt_tag_check": (ci, [cp]),
    "ckpt_store_prune_gc": (ci, [vp, P(Retention), vp, ci, P(P(GcReport))]),
    # the remote tier
    "ckpt_store_set_remote": (ci, [vp, cp, ctypes.c_uint]),
    "ckpt_store_remote": (cp, [vp]),
    "ckpt_store_push": (ci, [vp, u64, P(RemoteStats), vp, vp]),
    "ckpt_store_pull": (ci, [vp, u64, P(u64), P(RemoteStats), vp, vp]),
    "ckpt_store_upload_state": (ci, [vp, u64]),
    "ckpt_store_wait_uploaded": (ci, [vp, u64, ctypes.c_int64]),
    "ckpt_store_remote_list": (ci, [vp, ci, P(P(Info))]),
    "ckpt_store_remote_steps": (ctypes.c_long, [vp, P(P(u64))]),
    "ckpt_remote_adopt": (ci, [cp, cp, cp]),
    "ckpt_remote_stores": (ctypes.c_long, [cp, P(P(RemoteStore))]),
    "ckpt_remote_stores_free": (None, [P(RemoteStore)]),
}

_lock = threading.Lock()
_lib = None
_path = None


def _candidates():
    """Yields (path or name, where it came from) in the order they are tried."""
    env = os.environ.get("CKPT_LIBRARY")
    if env:
        yield env, "$CKPT_LIBRARY"
        return  # an explicit choice is not second-guessed
    here = Path(__file__).resolve().parent
    yield str(here / "_native" / SONAME), "the package"  # a wheel (pip install ./python)
    try:
        from . import _installed  # written by `make install` (python/install.sh)
        yield os.path.join(_installed.LIBDIR, SONAME), "make install's LIBDIR"
    except ImportError:
        pass
    repo = here.parent.parent
    if (repo / "lib" / "libckpt.map").is_file():  # the package of a source checkout
        yield str(repo / "build" / "lib" / SONAME), "the source tree's `make`"
        yield str(repo / "build" / "wheel" / "lib" / SONAME), "the source tree's wheel build"
    found = ctypes.util.find_library("ckpt")
    if found:
        yield found, "ctypes.util.find_library"
    yield SONAME, "the dynamic loader's search path"
    dirs = ["/usr/local/lib", "/usr/local/lib64", "/usr/lib", "/usr/lib64"]
    multiarch = sysconfig.get_config_var("MULTIARCH")
    if multiarch:
        dirs[1:1] = ["/usr/local/lib/" + multiarch]
        dirs.append("/usr/lib/" + multiarch)
    for d in dirs:
        yield os.path.join(d, SONAME), "standard path"


def _open(cand):
    """The library at cand (a ctypes.CDLL), its prototypes declared; None and why when it is
    missing or not a libckpt this binding can use."""
    if os.sep in cand and not os.path.exists(cand):
        return None, None  # None: simply not there
    try:
        lib = ctypes.CDLL(cand)
    except OSError as e:
        if os.sep not in cand and "cannot open shared object file" in str(e):
            return None, None
        return None, str(e)
    if not hasattr(lib, "ckpt_save_submit"):
        return None, "not libckpt, or a libckpt without ckpt_save_submit"
    for name, (res, args) in list(_PROTOS.items()) + list(_OPTIONAL.items()):
        f = getattr(lib, name, None)
        if f is not None:
            f.restype = res
            f.argtypes = args
    ver = lib.ckpt_version().decode()
    major, minor = (int(x) for x in ver.split(".")[:2])
    if major != 0 or minor < 1:
        raise VersionError(f"{cand}: libckpt {ver} is not supported by this binding (needs 0.x, x >= 1)")
    return lib, None


def _place(cand, where):
    """How the error names a candidate: its directory for a file of a standard place."""
    if where == "$CKPT_LIBRARY":
        return f"{cand} ({where})"
    if os.sep not in cand:
        return where
    return os.path.dirname(cand) + ("" if where == "standard path" else f" ({where})")


def _not_found(tried):
    """The one-line LibraryNotFoundError for tried = [(candidate, where, why or None)]."""
    absent = [_place(c, w) for c, w, why in tried if why is None]
    parts = (["not found: " + ", ".join(absent)] if absent else []) + \
        [f"{c} ({w}): {why}" for c, w, why in tried if why is not None]
    if os.environ.get("CKPT_LIBRARY"):
        todo = "set CKPT_LIBRARY to a libckpt.so.0 that loads, or unset it"
    else:
        todo = ("install the package with its library (`pip install ./python` in a libckpt "
                "checkout), or run `make install`, or set CKPT_LIBRARY=/path/to/libckpt.so.0")
    err = LibraryNotFoundError(f"libckpt: cannot find or load {SONAME} ({'; '.join(parts)}): {todo}")
    err.tried = tried
    return err


def load():
    """Returns the loaded library (a ctypes.CDLL), loading it on first use."""
    global _lib, _path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        for cand, where in _candidates():
            lib, why = _open(cand)
            if lib is not None:
                _lib, _path = lib, cand
                return lib
            tried.append((cand, where, why))
        raise _not_found(tried)


def has(name):
    """True when the loaded library exports function `name`."""
    return hasattr(load(), name)


def need(name):
    """The function `name`, or UnsupportedError when this libckpt lacks it."""
    if not has(name):
        from .errors import UnsupportedError
        raise UnsupportedError(f"{name} is not in this libckpt ({_path}): update the library")
    return getattr(load(), name)


def library_path():
    """The path (or name) from which libckpt was loaded."""
    load()
    return _path


def errmsg():
    return load().ckpt_errmsg().decode(errors="replace")


def make_error(rc, what=None, hint=None):
    """Builds the exception for return code rc (negative CKPT_E_*), with libckpt's message
    (prefixed with `what`, followed by `hint`)."""
    lib = load()
    code = abs(int(rc))
    msg = lib.ckpt_errmsg().decode(errors="replace")
    name = lib.ckpt_strerror(code).decode(errors="replace")
    if not msg:
        msg = name
    if what:
        msg = f"{what}: {msg}"
    if hint:
        msg = f"{msg} ({hint})"
    return error_class(code)(msg, code=code, name=name)


def check(rc, what=None):
    """Raises the CkptError for a negative return code; returns rc otherwise."""
    if rc < 0:
        raise make_error(rc, what)
    return rc


def dtype_name(dt):
    n = load().ckpt_dtype_name(dt)
    return n.decode() if n else f"dtype {dt}"


def dtype_size(dt):
    return load().ckpt_dtype_size(dt)


def tensor_dict(ti):
    """A TensorInfo (of a reader or a multi-rank reader) as the dict the binding hands out."""
    return {"name": ti.name.decode(), "dtype": dtype_name(ti.dtype), "ckpt_dtype": ti.dtype,
            "shape": tuple(ti.shape[k] for k in range(ti.ndim)), "nbytes": ti.nbytes,
            "chunks": ti.chunks, "chunks_new": ti.chunks_new, "bytes_new": ti.bytes_new}


def stats_dict(st):
    out = {}
    for name, _ in Stats._fields_:
        v = getattr(st, name)
        if isinstance(v, bytes):
            v = v.split(b"\0", 1)[0].decode(errors="replace")
        out[name] = v
    out["direct_io"] = bool(out["direct_io"])
    return out


def info_dict(inf):
    d = {name: getattr(inf, name) for name, _ in Info._fields_}
    # ckpt_info.tags: the tags joined by ',' ("" or NULL: none), as a list in the order added
    t = d.get("tags")
    d["tags"] = t.decode().split(",") if t else []
    return d


def tag_list(tags, what="tags"):
    """tags (a string for one tag, or an iterable of strings) as a list of str, each checked by
    libckpt's rule (ckpt_tag_check: InvalidArgumentError naming the tag and what is wrong)."""
    if tags is None:
        return []
    if isinstance(tags, (str, bytes)):
        tags = [tags]
    out = []
    for t in tags:
        if isinstance(t, bytes):
            t = t.decode()
        if not isinstance(t, str):
            raise TypeError(f"{what}: a tag must be a str, got {type(t).__name__}")
        check(need("ckpt_tag_check")(t.encode()), f"{what}: tag {t!r}")
        out.append(t)
    return out


__all__ = ["load", "library_path", "check", "make_error", "CkptError"]
