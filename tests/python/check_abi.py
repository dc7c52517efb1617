#!/usr/bin/env python3
"""The ctypes declarations of the Python binding (python/libckpt/_lib.py, the one place that
mirrors include/ckpt.h) against the header itself (tests/python/t-ctypes-abi.sh; needs a C
compiler and python3, not torch nor the built library):

- every struct the binding mirrors (L.STRUCTS, each naming its C struct in _c_name_): its size,
  and each field's offset and size, as the compiler lays them out (a C program generated from
  the declarations prints sizeof/offsetof); a field the binding names that C lacks fails to
  compile, one it lacks shifts the offsets or the size; a field of a callback type is checked as
  the callbacks are;
- every function the binding declares (L.PROTOS): declared in include/ckpt.h (parsed with a
  regex), with as many parameters, each of the same kind (pointer, or an integer or floating
  type of the same size and signedness, enums of either sign), and the same result;
- every callback type (L.C_CALLBACKS, and the function pointers in the structs) with the same
  parameters and result as the header's typedef or member;
- every constant the binding mirrors (L.C_CONSTANTS) with the header's value;
- no other module of python/libckpt declares a struct, a prototype or a callback type
  (_fields_, argtypes, restype, CFUNCTYPE), and every ckpt_* function the package calls is
  declared in L.PROTOS.

--selftest also checks that the check fails: a field dropped, a prototype with a parameter
less, a callback with its parameters swapped, a constant changed, each must be reported."""

import ctypes
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
HEADER = os.path.join(ROOT, "include", "ckpt.h")
PKG = os.path.join(ROOT, "python", "libckpt")
sys.path.insert(0, os.path.join(ROOT, "python"))

from libckpt import _lib as L  # noqa: E402  (declarations only: the library is not loaded)

_KEYWORDS = {"int", "long", "char", "short", "unsigned", "signed", "double", "float", "void"}


# ------------------------------------------------------------------------------ the header
def _header_text():
    with open(HEADER) as f:
        text = f.read()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    return "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#"))


def _split_params(params):
    params = " ".join(params.split())
    if params in ("", "void"):
        return []
    return [p.strip() for p in params.split(",")]


def _c_type(decl, named=True):
    """The type of a parameter declaration (its name dropped when named), as
    ("ptr", None) / ("void", None) / ("scalar", "TYPE") / ("fn", "TYPEDEF")."""
    decl = " ".join(t for t in decl.replace("*", " * ").split() if t not in ("const", "struct",
                                                                             "enum"))
    if "*" in decl or "[" in decl:
        return ("ptr", None)
    toks = decl.split()
    if named and len(toks) >= 2 and toks[-1] not in _KEYWORDS:
        toks = toks[:-1]
    t = " ".join(toks)
    if t == "void":
        return ("void", None)
    return ("scalar", t)


def parse_header():
    """{function: (result, [params])}, {callback typedef: (result, [params])}, {struct:
    body}, the enum typedef names; results and params as _c_type gives them."""
    text = _header_text()
    funcs = {}
    for m in re.finditer(r"CKPT_API\s+([^;(]*?)\b(ckpt_\w+)\s*\(([^()]*)\)\s*;", text):
        funcs[m.group(2)] = (_c_type(m.group(1), named=False),
                             [_c_type(p) for p in _split_params(m.group(3))])
    callbacks = {}
    for m in re.finditer(r"typedef\s+([^;()]*?)\(\s*\*\s*(\w+)\s*\)\s*\(([^()]*)\)\s*;", text):
        callbacks[m.group(2)] = (_c_type(m.group(1), named=False),
                                 [_c_type(p) for p in _split_params(m.group(3))])
    structs = {}
    for m in re.finditer(r"typedef\s+struct\s+(\w+)\s*\{(.*?)\}\s*(\w+)\s*;", text, flags=re.S):
        structs[m.group(3)] = m.group(2)
    enums = set(re.findall(r"typedef\s+enum\s+\w*\s*\{[^}]*\}\s*(\w+)\s*;", text))
    declared = len(re.findall(r"^\s*CKPT_API\b", text, flags=re.M))
    if len(funcs) != declared:
        raise SystemExit(f"FAIL: parsed {len(funcs)} of the {declared} prototypes of "
                         f"include/ckpt.h: a declaration this script's regex does not read")
    return funcs, callbacks, structs, enums


def member_fn(body, field):
    """(result, [params]) of function pointer member `field` of a struct body, or None."""
    m = re.search(r"([\w\s\*]+?)\(\s*\*\s*" + re.escape(field) + r"\s*\)\s*\(([^()]*)\)\s*;",
                  body)
    if not m:
        return None
    return (_c_type(m.group(1), named=False), [_c_type(p) for p in _split_params(m.group(2))])


def member_typedef(body, field):
    """The type name of member `field` declared as "TYPE field;" (a callback typedef), or None."""
    m = re.search(r"(\w+)\s+" + re.escape(field) + r"\s*;", body)
    return m.group(1) if m else None


# ------------------------------------------------------------------------------ ctypes side
def ct_kind(t):
    """A ctypes type as ("void"|"ptr"|"fn"|"scalar", (size, is float, is signed) or the type)."""
    if t is None:
        return ("void", None)
    if isinstance(t, type) and issubclass(t, ctypes._CFuncPtr):
        return ("fn", t)
    if t in (ctypes.c_void_p, ctypes.c_char_p) or \
            (isinstance(t, type) and issubclass(t, (ctypes._Pointer, ctypes.Array))):
        return ("ptr", None)
    code = t._type_
    return ("scalar", (ctypes.sizeof(t), code in "fd", code in "bhilqfd"))


class Decls:
    """What is checked: the binding's declarations, or a deliberately broken copy of them."""

    def __init__(self, structs, protos, callbacks, constants, values):
        self.structs, self.protos, self.callbacks = structs, protos, callbacks
        self.constants, self.values = constants, values


def real_decls():
    return Decls(list(L.STRUCTS), dict(L.PROTOS), dict(L.C_CALLBACKS), dict(L.C_CONSTANTS),
                 {k: getattr(L, k) for k in L.C_CONSTANTS})


# ------------------------------------------------------------------------------ the C program
def c_program(d, scalars):
    out = ["#include <stddef.h>", "#include <stdio.h>", '#include "ckpt.h"', "",
           "int main(void)", "{"]
    for cls in d.structs:
        c = cls._c_name_
        out.append(f'\tprintf("struct {c} %zu\\n", sizeof({c}));')
        for name, _ in cls._fields_:
            out.append(f'\tprintf("field {c} {name} %zu %zu\\n", offsetof({c}, {name}), '
                       f'sizeof((({c} *)0)->{name}));')
    for i, t in enumerate(scalars):
        out.append(f'\tprintf("type {i} %zu %d %d\\n", sizeof({t}), '
                   f'(int)(({t})0.5 != ({t})0), (int)(({t})-1 < ({t})0));')
    for py, c in sorted(d.constants.items()):
        out.append(f'\tprintf("const {py} %llu\\n", (unsigned long long)({c}));')
    for f in sorted(d.protos):
        out.append(f"\t(void)&{f};")
    out += ["\treturn 0;", "}", ""]
    return "\n".join(out)


def run_c(d, scalars):
    """The C program's output as {(kind, key...): values}, or raises RuntimeError (compiler's
    message) when it does not compile."""
    cc = os.environ.get("CC", "cc")
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = os.path.join(tmp, "abi.c"), os.path.join(tmp, "abi")
        with open(src, "w") as f:
            f.write(c_program(d, scalars))
        p = subprocess.run([cc, "-std=gnu11", "-I" + os.path.join(ROOT, "include"), src, "-o",
                            exe], capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(" ".join(p.stderr.split())[:600])
        out = subprocess.run([exe], capture_output=True, text=True, check=True).stdout
    res = {}
    for ln in out.splitlines():
        w = ln.split()
        if w[0] == "struct":
            res[("struct", w[1])] = int(w[2])
        elif w[0] == "field":
            res[("field", w[1], w[2])] = (int(w[3]), int(w[4]))
        elif w[0] == "type":
            res[("type", scalars[int(w[1])])] = (int(w[2]), w[3] == "1", w[4] == "1")
        elif w[0] == "const":
            res[("const", w[1])] = int(w[2])
    return res


# ------------------------------------------------------------------------------ the check
def _sig_problems(what, c_sig, ct_res, ct_args, types, enums, c_callbacks, callbacks):
    """Problems of a ctypes signature (ct_res, ct_args) against the header's c_sig; a parameter
    of a callback typedef of the header (c_callbacks) must be the ctypes type callbacks names."""
    probs = []
    c_res, c_args = c_sig
    if len(c_args) != len(ct_args):
        return [f"{what}: {len(ct_args)} parameters declared, include/ckpt.h has {len(c_args)}"]
    for i, (c, t) in enumerate([(c_res, ct_res)] + list(zip(c_args, ct_args))):
        where = "result" if i == 0 else f"parameter {i}"
        k = ct_kind(t)
        if c[0] == "scalar" and c[1] in c_callbacks:
            if k[0] != "fn" or callbacks.get(c[1]) is not k[1]:
                probs.append(f"{what}: {where} is a {c[1]}, declared as {t}")
            continue
        if c[0] == "ptr":
            if k[0] not in ("ptr", "fn"):
                probs.append(f"{what}: {where} is a pointer in include/ckpt.h, declared as {t}")
            continue
        if c[0] == "void":
            if k[0] != "void":
                probs.append(f"{what}: {where} is void in include/ckpt.h, declared as {t}")
            continue
        want = types.get(c[1])
        if k[0] != "scalar" or want is None:
            probs.append(f"{what}: {where} is {c[1]} in include/ckpt.h, declared as {t}")
            continue
        size, flt, sgn = k[1]
        if (size, flt) != want[:2] or (sgn != want[2] and c[1] not in enums):
            probs.append(f"{what}: {where} is {c[1]} (size {want[0]}, "
                         f"{'floating' if want[1] else 'signed' if want[2] else 'unsigned'}) in "
                         f"include/ckpt.h, declared as {t.__name__}")
    return probs


def check(d):
    """The problems found with declarations d (an empty list: they match the header)."""
    funcs, c_callbacks, c_structs, enums = parse_header()
    probs = []
    scalars = set()
    sigs = list(funcs.values()) + list(c_callbacks.values())
    for cls in d.structs:
        body = c_structs.get(cls._c_name_, "")
        for name, _ in cls._fields_:
            fn = member_fn(body, name)
            if fn:
                sigs.append(fn)
    for res, args in sigs:
        for c in [res] + args:
            if c[0] == "scalar" and c[1] not in c_callbacks:
                scalars.add(c[1])
    scalars = sorted(scalars)
    try:
        out = run_c(d, scalars)
    except RuntimeError as e:
        return [f"the C program generated from the declarations does not compile: {e}"]
    types = {k[1]: v for k, v in out.items() if k[0] == "type"}
    # structs
    for cls in d.structs:
        c = cls._c_name_
        if out[("struct", c)] != ctypes.sizeof(cls):
            probs.append(f"{cls.__name__}: sizeof({c}) is {out[('struct', c)]}, the ctypes "
                         f"struct {ctypes.sizeof(cls)}")
        body = c_structs.get(c)
        if body is None:
            probs.append(f"{cls.__name__}: no struct {c} in include/ckpt.h")
            continue
        for name, t in cls._fields_:
            off, size = out[("field", c, name)]
            f = getattr(cls, name)
            if (f.offset, f.size) != (off, size):
                probs.append(f"{cls.__name__}.{name}: offset {f.offset} size {f.size}, {c} has "
                             f"offset {off} size {size}")
            if ct_kind(t)[0] != "fn":
                continue
            fn = member_fn(body, name)
            if fn is not None:
                probs += _sig_problems(f"{c}.{name}", fn, t._restype_, list(t._argtypes_), types,
                                       enums, c_callbacks, d.callbacks)
            elif d.callbacks.get(member_typedef(body, name)) is not t:
                probs.append(f"{c}.{name}: a {member_typedef(body, name)} in include/ckpt.h, "
                             f"declared as another callback type")
    # functions
    for name, (res, args) in sorted(d.protos.items()):
        if name not in funcs:
            probs.append(f"{name}: not declared in include/ckpt.h")
            continue
        probs += _sig_problems(name, funcs[name], res, args, types, enums, c_callbacks,
                               d.callbacks)
    # callback typedefs
    for name, t in sorted(d.callbacks.items()):
        if name not in c_callbacks:
            probs.append(f"{name}: no such callback typedef in include/ckpt.h")
            continue
        probs += _sig_problems(name, c_callbacks[name], t._restype_, list(t._argtypes_), types,
                               enums, c_callbacks, d.callbacks)
    # constants
    for py in sorted(d.constants):
        want, have = out[("const", py)], d.values[py] % (1 << 64)
        if want != have:
            probs.append(f"constant {py}: {d.values[py]}, {d.constants[py]} is "
                         f"{want if want < 1 << 63 else want - (1 << 64)}")
    return probs


def package_problems():
    """Declarations outside _lib.py, and ckpt_* calls to functions L.PROTOS lacks."""
    probs = []
    for fn in sorted(os.listdir(PKG)):
        if not fn.endswith(".py"):
            continue
        with open(os.path.join(PKG, fn)) as f:
            src = f.read()
        if fn != "_lib.py":
            for what in ("_fields_", "argtypes", "restype", "CFUNCTYPE"):
                if what in src:
                    probs.append(f"python/libckpt/{fn}: declares {what} (only _lib.py mirrors "
                                 f"include/ckpt.h)")
        for name in sorted(set(re.findall(r"\.(ckpt_\w+)\s*\(", src))):
            if name not in L.PROTOS:
                probs.append(f"python/libckpt/{fn}: calls {name}, which L.PROTOS does not "
                             f"declare")
    return probs


# ------------------------------------------------------------------------------ self-test
def broken_variants():
    """(what is broken, declarations with it broken), each of which the check must report."""
    out = []
    d = real_decls()
    stats = type("Stats", (L.Sized,), {"_c_name_": "ckpt_stats", "_fields_": [
        f for f in L.Stats._fields_ if f[0] != "wait_seconds"]})
    d.structs = [stats if c is L.Stats else c for c in d.structs]
    out.append(("ckpt_stats without wait_seconds", d))
    d = real_decls()
    tensor = type("Tensor", (L.Sized,), {"_c_name_": "ckpt_tensor", "_fields_": [
        (n, ctypes.c_uint if n == "dtype" else t) if n != "mem" else ("mem", ctypes.c_int64)
        for n, t in L.Tensor._fields_]})
    d.structs = [tensor if c is L.Tensor else c for c in d.structs]
    out.append(("ckpt_tensor.mem as int64_t", d))
    d = real_decls()
    res, args = d.protos["ckpt_save_begin"]
    d.protos["ckpt_save_begin"] = (res, [a for i, a in enumerate(args) if i != 2])
    out.append(("ckpt_save_begin without its options", d))
    d = real_decls()
    res, args = d.protos["ckpt_reader_read"]
    d.protos["ckpt_reader_read"] = (res, args[:3] + [ctypes.c_int64] + args[4:])
    out.append(("ckpt_reader_read's mem as int64_t", d))
    d = real_decls()
    d.protos["ckpt_store_push"] = (ctypes.c_int, [ctypes.c_void_p])
    out.append(("a function the header lacks", d))
    d = real_decls()
    d.callbacks["ckpt_progress_fn"] = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint64,
                                                       ctypes.c_uint64, ctypes.c_void_p)
    out.append(("ckpt_progress_fn's parameters in the old order", d))
    d = real_decls()
    d.values["GC_REMOTE"] = 16
    out.append(("CKPT_GC_REMOTE changed", d))
    return out


def main():
    probs = check(real_decls()) + package_problems()
    for p in probs:
        print("FAIL:", p)
    if probs:
        return 1
    n_fields = sum(len(c._fields_) for c in L.STRUCTS)
    print(f"ok: {len(L.STRUCTS)} structs ({n_fields} fields), {len(L.PROTOS)} functions, "
          f"{len(L.C_CALLBACKS)} callback types and {len(L.C_CONSTANTS)} constants of "
          f"python/libckpt/_lib.py match include/ckpt.h")
    if "--selftest" in sys.argv[1:]:
        for what, d in broken_variants():
            found = check(d)
            if not found:
                print(f"FAIL: self-test: {what}: not reported")
                return 1
            print(f"ok: self-test: {what}: {found[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
