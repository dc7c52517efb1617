"""Restore targets: checking that a caller's tensor can receive a saved one as it is, and
allocating new ones (placed so that libckpt can read into them with O_DIRECT). Shared by
store.py and _dread.py."""

from . import _tree as T
from .errors import MismatchError, UnsupportedError


def _desc(obj):
    if T.is_torch_tensor(obj):
        return f"{obj.dtype} {list(obj.shape)}"
    return f"numpy {obj.dtype} {list(obj.shape)}"


def _check_target(name, ti, obj, step):
    """Raises MismatchError unless obj can receive the saved tensor as it is."""
    saved = f"{ti['dtype']} {list(ti['shape'])}"
    if T.is_torch_tensor(obj):
        dt = T.torch_dtypes().get(obj.dtype)
        if obj.device.type not in ("cpu", "cuda"):
            raise MismatchError(f"tensor {name!r}: device {obj.device} is not supported")
    elif T.is_np_array(obj):
        dt = T.np_dtypes().get(obj.dtype.name) if obj.dtype.isnative or obj.dtype.itemsize == 1 else None
        if not obj.flags.writeable:
            raise MismatchError(f"tensor {name!r}: the target array is read-only")
    else:
        raise MismatchError(f"tensor {name!r}: target is a {type(obj).__name__}, not a tensor")
    if dt != ti["ckpt_dtype"]:
        raise MismatchError(f"tensor {name!r}: dtype mismatch: checkpoint {step} has {saved}, "
                            f"the target is {_desc(obj)} (no conversion is made)")
    if tuple(obj.shape) != tuple(ti["shape"]):
        raise MismatchError(f"tensor {name!r}: shape mismatch: checkpoint {step} has {saved}, "
                            f"the target is {_desc(obj)}")


# Host tensors of at least _DIRECT_MIN bytes are placed CKPT_RESTORE_DIRECT_OFFSET bytes past a
# 4 KiB boundary (ckpt.h), where libckpt reads raw chunks straight into them with O_DIRECT, with
# no copy out of its read buffer; the price is up to 4 KiB more storage per tensor.
_DIRECT_OFF, _DIRECT_ALIGN, _DIRECT_MIN = 64, 4096, 1 << 20


def _direct_place(flat, addr, nbytes):
    """The nbytes-long slice of the 1-D byte buffer `flat` (at address addr) that starts
    _DIRECT_OFF bytes past a 4 KiB boundary."""
    off = (_DIRECT_OFF - addr) % _DIRECT_ALIGN
    return flat[off:off + nbytes]


def _alloc(kind, ti, device):
    # the size from the shape asked for: get_slice passes a part of the tensor's shape
    if kind == "torch":
        import torch
        dt = T.torch_dtype_of(ti["ckpt_dtype"])
        if dt is None:
            raise UnsupportedError(f"tensor {ti['name']!r}: this torch has no dtype for {ti['dtype']}")
        t = torch.empty(ti["shape"], dtype=dt, device=device or "cpu")
        nb = t.numel() * t.element_size()
        if t.device.type != "cpu" or nb < _DIRECT_MIN or t.data_ptr() % _DIRECT_ALIGN == _DIRECT_OFF:
            return t  # glibc's memalign often gives torch's large tensors that place already
        del t
        flat = torch.empty(nb + _DIRECT_ALIGN, dtype=torch.uint8)
        return _direct_place(flat, flat.data_ptr(), nb).view(dt).view(ti["shape"])
    import numpy as np
    dt = T.np_dtype_of(ti["ckpt_dtype"])
    if dt is None:
        raise UnsupportedError(f"tensor {ti['name']!r}: numpy has no dtype for {ti['dtype']} "
                               f"(install ml_dtypes, or save it as a torch tensor)")
    a = np.empty(ti["shape"], dtype=dt)
    if a.nbytes < _DIRECT_MIN or a.__array_interface__["data"][0] % _DIRECT_ALIGN == _DIRECT_OFF:
        return a
    nb = a.nbytes
    del a
    flat = np.empty(nb + _DIRECT_ALIGN, dtype=np.uint8)
    return _direct_place(flat, flat.__array_interface__["data"][0], nb).view(dt).reshape(ti["shape"])


def _data_ptr(obj):
    return obj.data_ptr() if T.is_torch_tensor(obj) else obj.__array_interface__["data"][0]
