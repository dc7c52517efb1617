"""Loading libckpt.so and declaring its C interface (include/ckpt.h) for ctypes: the one place
of the package that mirrors the header (every prototype it calls, every struct, callback type and
constant it uses), which tests/python/t-ctypes-abi.sh checks against include/ckpt.h."""

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
COMPRESS_NONE, COMPRESS_ZSTD = 0, 1
ENGINE_AUTO, ENGINE_IO_URING, ENGINE_PSYNC = 0, 1, 2
COMPRESS = {"none": COMPRESS_NONE, "zstd": COMPRESS_ZSTD}
ENGINE = {"auto": ENGINE_AUTO, "io_uring": ENGINE_IO_URING, "psync": ENGINE_PSYNC}

SAVE_THREADED = 1  # ckpt_save_options.flags: the library's thread may call the communicator
SAVE_DEFER = 2     # ... and the commit waits for ckpt_save_release
READ_AS_SAVED = 1  # ckpt_reader_open: the pieces as saved, not the global tensors
REMOTE_UPLOAD = 1  # ckpt_remote_open flag
UPLOAD_LOCAL, UPLOAD_UPLOADING, UPLOAD_REMOTE = 0, 1, 2  # ckpt_remote_state
UPLOAD_STATES = {UPLOAD_LOCAL: "local", UPLOAD_UPLOADING: "uploading", UPLOAD_REMOTE: "remote"}
GC_DRY_RUN, GC_FORCE, GC_NEWEST, GC_REMOTE = 1, 2, 4, 8
E_IO, E_INVAL, E_STATE = 1, 3, 12

# Every constant above that include/ckpt.h defines, by its C name (tests/python/check_abi.py
# compares the values with the header's).
C_CONSTANTS = {
    "STEP_LATEST": "CKPT_STEP_LATEST", "MEM_HOST": "CKPT_MEM_HOST", "MAX_DIMS": "CKPT_MAX_DIMS",
    **{n: "CKPT_DTYPE_" + n for n in ("BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "I16", "U16",
                                       "F16", "BF16", "I32", "U32", "F32", "F64", "I64", "U64")},
    **{"OPT_" + n: "CKPT_OPT_" + n for n in (
        "CREATE", "CHUNK_SIZE", "COMPRESS", "ZSTD_LEVEL", "READ_ONLY", "DIRECT_IO", "IO_SIZE",
        "OVERWRITE", "PACK_SIZE", "THREADS", "POOL_SIZE", "QUEUE_DEPTH", "IO_ENGINE",
        "LOCK_WAIT_MS", "REMOTE_PARALLEL", "REMOTE_BANDWIDTH")},
    "COMPRESS_NONE": "CKPT_COMPRESS_NONE", "COMPRESS_ZSTD": "CKPT_COMPRESS_ZSTD",
    "ENGINE_AUTO": "CKPT_ENGINE_AUTO", "ENGINE_IO_URING": "CKPT_ENGINE_IO_URING",
    "ENGINE_PSYNC": "CKPT_ENGINE_PSYNC",
    "SAVE_THREADED": "CKPT_SAVE_THREADED", "SAVE_DEFER": "CKPT_SAVE_DEFER",
    "READ_AS_SAVED": "CKPT_READ_AS_SAVED", "REMOTE_UPLOAD": "CKPT_REMOTE_UPLOAD",
    "UPLOAD_LOCAL": "CKPT_UPLOAD_LOCAL", "UPLOAD_UPLOADING": "CKPT_UPLOAD_UPLOADING",
    "UPLOAD_REMOTE": "CKPT_UPLOAD_REMOTE",
    "GC_DRY_RUN": "CKPT_GC_DRY_RUN", "GC_FORCE": "CKPT_GC_FORCE", "GC_NEWEST": "CKPT_GC_NEWEST",
    "GC_REMOTE": "CKPT_GC_REMOTE",
    "E_IO": "CKPT_E_IO", "E_INVAL": "CKPT_E_INVAL", "E_STATE": "CKPT_E_STATE",
}

u64 = ctypes.c_uint64
i64 = ctypes.c_int64
u32 = ctypes.c_uint32
sz = ctypes.c_size_t
vp = ctypes.c_void_p
cp = ctypes.c_char_p
ci = ctypes.c_int
cu = ctypes.c_uint
P = ctypes.POINTER


# ------------------------------------------------------------------------------- the structs
# Each mirrors the struct of include/ckpt.h named by _c_name_, field for field under the C names
# (tests/python/check_abi.py compares sizes and offsets with the compiler's).

class Sized(ctypes.Structure):
    """A struct the caller allocates, which leads with struct_size: made with it set to the
    struct's size (the library refuses one without: -CKPT_E_INVAL). Fields by keyword only."""

    def __init__(self, **fields):
        super().__init__(**fields)
        self.struct_size = ctypes.sizeof(self)


def fields_of(cls):
    """The field names of a struct the binding hands out as a dict (struct_size left out)."""
    return [name for name, _ in cls._fields_ if name != "struct_size"]


class Info(Sized):
    _c_name_ = "ckpt_info"
    _fields_ = [("struct_size", sz), ("step", u64), ("time", i64), ("tensors", u64),
                ("logical_bytes", u64), ("new_bytes", u64), ("stored_bytes", u64),
                ("chunks", u64), ("new_chunks", u64), ("error", ci), ("tags", cp)]


class RemoteStore(ctypes.Structure):
    _c_name_ = "ckpt_remote_store"
    _fields_ = [("id", ctypes.c_char * 33), ("host", cp), ("path", cp), ("checkpoints", u64),
                ("newest_step", u64), ("bytes", u64)]


class RemoteStats(Sized):
    _c_name_ = "ckpt_remote_stats"
    _fields_ = [("struct_size", sz), ("packs_sent", u64), ("bytes_sent", u64),
                ("packs_present", u64), ("bytes_present", u64)]


class Stats(Sized):
    _c_name_ = "ckpt_stats"
    _fields_ = [("struct_size", sz), ("step", u64), ("tensors", u64), ("logical_bytes", u64),
                ("chunks", u64), ("chunks_new", u64), ("chunks_reused", u64),
                ("bytes_hashed", u64), ("bytes_stored", u64), ("bytes_written", u64),
                ("bytes_read", u64), ("seconds", ctypes.c_double),
                ("snapshot_seconds", ctypes.c_double), ("persist_seconds", ctypes.c_double),
                ("wait_seconds", ctypes.c_double), ("pool_bytes", u64), ("pool_peak", u64),
                ("threads", u32), ("data_dirs", u32), ("direct_io", ci),
                ("engine", ctypes.c_char * 16), ("gpu", ctypes.c_char * 16)]


class TensorInfo(Sized):
    _c_name_ = "ckpt_tensor_info"
    _fields_ = [("struct_size", sz), ("name", cp), ("dtype", ci), ("ndim", cu),
                ("shape", P(u64)), ("nbytes", u64), ("chunks", u64), ("chunks_new", u64),
                ("bytes_new", u64), ("shards", u32), ("replicated", ctypes.c_int32)]


class ChunkInfo(Sized):
    _c_name_ = "ckpt_chunk_info"
    _fields_ = [("struct_size", sz), ("digest", ctypes.c_uint8 * 16), ("pack_id", u32),
                ("offset", u64), ("raw_bytes", u32), ("stored_bytes", u32), ("disk_bytes", u64),
                ("codec", ci), ("is_new", ci), ("rank", ci)]


class Damage(ctypes.Structure):
    _c_name_ = "ckpt_damage"
    _fields_ = [("step", u64), ("tensor", cp), ("chunk", u64), ("offset", u64), ("file", cp),
                ("error", ci), ("message", cp)]


class DuEntry(ctypes.Structure):
    _c_name_ = "ckpt_du_entry"
    _fields_ = [("step", u64), ("referenced_bytes", u64), ("exclusive_bytes", u64),
                ("shared_bytes", u64)]


class Du(ctypes.Structure):
    _c_name_ = "ckpt_du"
    _fields_ = [("n", sz), ("entries", P(DuEntry)), ("invalid_manifests", sz), ("packs", u64),
                ("pack_bytes", u64), ("live_bytes", u64), ("garbage_bytes", u64),
                ("unreferenced_pack_bytes", u64), ("dead_record_bytes", u64),
                ("leftover_bytes", u64), ("manifest_bytes", u64), ("parts", u64),
                ("part_bytes", u64)]


class PruneChoice(ctypes.Structure):
    _c_name_ = "ckpt_prune_choice"
    _fields_ = [("step", u64), ("rule", ci), ("nth", u32)]


class Report(ctypes.Structure):
    _c_name_ = "ckpt_report"
    _fields_ = [("steps_removed", P(u64)), ("n_steps_removed", sz),
                ("choices", P(PruneChoice)), ("n_choices", sz),
                ("packs_removed", u64), ("packs_compacted", u64), ("manifests_rewritten", u64),
                ("parts_removed", u64), ("leftovers_removed", u64), ("leftover_bytes", u64),
                ("bytes_freed", u64), ("bytes_copied", u64), ("files_left_alone", u64),
                ("left_alone", cp), ("packs_deferred", u64), ("reader", cp),
                ("packs_spared", u64), ("in_flight", cp), ("uploads_in_flight", u64)]


class Retention(Sized):
    _c_name_ = "ckpt_retention"
    _fields_ = [("struct_size", sz), ("keep_last", u64), ("keep_every", u64),
                ("keep_steps", P(u64)), ("n_keep_steps", sz), ("now", i64),
                ("keep_within", i64), ("keep_hourly", u64), ("keep_daily", u64),
                ("keep_weekly", u64), ("keep_monthly", u64), ("keep_yearly", u64),
                ("keep_tags", P(cp)), ("n_keep_tags", sz)]


# Callbacks (ckpt_progress_fn, ckpt_damage_fn, ckpt_dst_fn, and ckpt_comm's members).
PROGRESS_FN = ctypes.CFUNCTYPE(ci, vp, u64, u64)
DAMAGE_FN = ctypes.CFUNCTYPE(None, P(Damage), vp)
DST_FN = ctypes.CFUNCTYPE(vp, sz, P(TensorInfo), P(ci), vp)
AG_FN = ctypes.CFUNCTYPE(ci, vp, vp, sz, vp)
BC_FN = ctypes.CFUNCTYPE(ci, vp, vp, sz, ci)
BAR_FN = ctypes.CFUNCTYPE(ci, vp)
ERR_FN = ctypes.CFUNCTYPE(vp, vp)  # c_char_p results of callbacks would dangle: an address
NO_PROGRESS = PROGRESS_FN()  # NULL (ctypes takes no None for a function pointer argument)
# typedef name -> its ctypes type, for the check against the header
C_CALLBACKS = {"ckpt_progress_fn": PROGRESS_FN, "ckpt_damage_fn": DAMAGE_FN,
               "ckpt_dst_fn": DST_FN}


class GcPolicy(Sized):
    _c_name_ = "ckpt_gc_policy"
    _fields_ = [("struct_size", sz), ("compact_below", ctypes.c_double),
                ("max_unused", ctypes.c_double), ("on_progress", PROGRESS_FN),
                ("progress_arg", vp)]


class Comm(Sized):
    _c_name_ = "ckpt_comm"
    _fields_ = [("struct_size", sz), ("rank", ci), ("size", ci), ("ctx", vp),
                ("allgather", AG_FN), ("broadcast", BC_FN), ("barrier", BAR_FN),
                ("errmsg", ERR_FN)]


class SaveOptions(Sized):
    _c_name_ = "ckpt_save_options"
    _fields_ = [("struct_size", sz), ("comm", P(Comm)), ("flags", cu)]


class Tensor(Sized):
    _c_name_ = "ckpt_tensor"
    _fields_ = [("struct_size", sz), ("name", cp), ("dtype", ci), ("ndim", cu),
                ("shape", P(u64)), ("mem", ci), ("data", vp), ("global_shape", P(u64)),
                ("offsets", P(u64)), ("offset", u64), ("count", u64), ("replica", cu),
                ("nreplicas", cu)]


class Region(Sized):
    _c_name_ = "ckpt_region"
    _fields_ = [("struct_size", sz), ("offset", u64), ("count", u64), ("offsets", P(u64)),
                ("lengths", P(u64)), ("strides", P(u64)), ("comm", P(Comm)), ("root", ci)]


STRUCTS = [Info, RemoteStore, RemoteStats, Stats, TensorInfo, ChunkInfo, Damage, DuEntry, Du, PruneChoice,
           Report, Retention, GcPolicy, Comm, SaveOptions, Tensor, Region]


def u64s(vals):
    """A C array of uint64_t holding vals (one element at least: never a NULL pointer)."""
    vals = [int(v) for v in vals]
    return (u64 * max(1, len(vals)))(*vals)


# ------------------------------------------------------------------------------- the functions
# name -> (restype, argtypes), every function the binding calls (all of include/ckpt.h's that it
# uses; tests/python/check_abi.py checks each against the header's prototype).
PROTOS = {
    "ckpt_version": (cp, []),
    "ckpt_strerror": (cp, [ci]),
    "ckpt_errmsg": (cp, []),
    "ckpt_dtype_size": (sz, [ci]),
    "ckpt_dtype_name": (cp, [ci]),
    "ckpt_dtype_from_name": (ci, [cp]),
    "ckpt_options_create": (vp, []),
    "ckpt_options_free": (None, [vp]),
    "ckpt_options_set": (ci, [vp, ci, i64]),
    "ckpt_options_add_data_dir": (ci, [vp, cp]),
    "ckpt_store_open": (ci, [cp, vp, P(vp)]),
    "ckpt_store_close": (None, [vp]),
    "ckpt_store_reserve": (ci, [vp, u64]),
    "ckpt_store_path": (cp, [vp]),
    "ckpt_store_list": (ctypes.c_long, [vp, ci, P(P(Info))]),
    "ckpt_info_free": (None, [P(Info)]),
    "ckpt_store_resolve": (ci, [vp, u64, P(u64)]),
    # saving
    "ckpt_save_begin": (ci, [vp, u64, P(SaveOptions), P(vp)]),
    "ckpt_save_add": (ci, [vp, P(Tensor)]),
    "ckpt_save_set_meta": (ci, [vp, cp, cp]),
    "ckpt_save_add_tag": (ci, [vp, cp]),
    "ckpt_tag_check": (ci, [cp]),
    "ckpt_save_after_stream": (ci, [vp, vp]),
    "ckpt_save_submit": (ci, [vp]),
    "ckpt_save_wait_snapshot": (ci, [vp]),
    "ckpt_save_fence": (ci, [vp, vp]),
    "ckpt_save_poll": (ci, [vp]),
    "ckpt_save_wait": (ci, [vp, P(Stats)]),
    "ckpt_save_commit": (ci, [vp, P(Stats)]),
    "ckpt_save_abort": (None, [vp]),
    "ckpt_save_release": (ci, [vp, ci, cp]),
    # reading
    "ckpt_reader_open": (ci, [vp, u64, cu, P(vp)]),
    "ckpt_reader_close": (None, [vp]),
    "ckpt_reader_info": (ci, [vp, P(Info)]),
    "ckpt_reader_world_size": (cu, [vp]),
    "ckpt_reader_tensor_count": (sz, [vp]),
    "ckpt_reader_tensor": (ci, [vp, sz, P(TensorInfo)]),
    "ckpt_reader_find": (ctypes.c_long, [vp, cp]),
    "ckpt_reader_meta_count": (sz, [vp]),
    "ckpt_reader_meta": (ci, [vp, sz, P(cp), P(cp)]),
    "ckpt_reader_get_meta": (cp, [vp, cp]),
    "ckpt_reader_read": (ci, [vp, sz, P(Region), ci, vp, u64]),
    "ckpt_reader_read_all": (ci, [vp, DST_FN, vp]),
    "ckpt_reader_after_stream": (ci, [vp, vp]),
    "ckpt_reader_stats": (ci, [vp, P(Stats)]),
    "ckpt_reader_chunk": (ci, [vp, sz, u64, P(ChunkInfo)]),
    "ckpt_reader_verify": (ctypes.c_long, [vp, vp, DAMAGE_FN, PROGRESS_FN, vp]),
    # space, retention, gc
    "ckpt_store_du": (ci, [vp, P(P(Du))]),
    "ckpt_du_free": (None, [P(Du)]),
    "ckpt_store_prune": (ci, [vp, P(Retention), P(GcPolicy), ci, P(P(Report))]),
    "ckpt_store_gc": (ci, [vp, P(GcPolicy), ci, P(P(Report))]),
    "ckpt_store_delete": (ci, [vp, P(u64), sz, P(GcPolicy), ci, P(P(Report))]),
    "ckpt_report_free": (None, [P(Report)]),
    # the remote tier
    "ckpt_remote_open": (ci, [vp, cp, cu, P(vp)]),
    "ckpt_remote_close": (None, [vp]),
    "ckpt_remote_url": (cp, [vp]),
    "ckpt_remote_push": (ci, [vp, u64, P(RemoteStats), PROGRESS_FN, vp]),
    "ckpt_remote_pull": (ci, [vp, u64, P(u64), P(RemoteStats), PROGRESS_FN, vp]),
    "ckpt_remote_state": (ci, [vp, u64]),
    "ckpt_remote_wait": (ci, [vp, u64, i64]),
    "ckpt_remote_list": (ctypes.c_long, [vp, ci, P(P(Info))]),
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
    missing = [name for name in PROTOS if not hasattr(lib, name)]
    if missing:
        return None, (f"a libckpt without {missing[0]} (older than the API this binding "
                      f"speaks: include/ckpt.h with ckpt_reader_read and ckpt_save_add)")
    for name, (res, args) in PROTOS.items():
        f = getattr(lib, name)
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
    for name in fields_of(Stats):
        v = getattr(st, name)
        if isinstance(v, bytes):
            v = v.split(b"\0", 1)[0].decode(errors="replace")
        out[name] = v
    out["direct_io"] = bool(out["direct_io"])
    return out


def info_dict(inf):
    d = {name: getattr(inf, name) for name in fields_of(Info)}
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
        check(load().ckpt_tag_check(t.encode()), f"{what}: tag {t!r}")
        out.append(t)
    return out


__all__ = ["load", "library_path", "check", "make_error", "CkptError"]
