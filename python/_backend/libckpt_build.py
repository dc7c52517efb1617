"""The build backend of python/pyproject.toml (PEP 517, PEP 660): plain Python, no build
requirements, so `pip install ./python` works offline even with pip's build isolation.

A wheel holds the package (python/libckpt) and the library it wraps, built from the libckpt
source tree that holds python/ (`make B=build/wheel python-lib`: a build tree of its own, never
a sanitizer build): libckpt/_native/libckpt.so.0, and libckpt-cuda.so.0 beside it when the CUDA
provider is built (lib/gpu/gpu.c loads it from beside libckpt.so), and the ckptctl program there,
which the console entry point `ckptctl` (libckpt/_ckptctl.py) runs. The library does not depend on
the Python ABI, so the tag is py3-none-<platform>. Without the C sources (python/ copied alone,
an sdist) there is nothing to build the library from: that is refused with a one-line message,
and so is build_sdist.

Also a script: `python3 python/_backend/libckpt_build.py wheel DIR` (what `make wheel` runs)
prints the wheel it wrote.
"""

import base64
import hashlib
import io
import os
import re
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

PYDIR = Path(__file__).resolve().parent.parent   # python/
ROOT = PYDIR.parent                              # the libckpt source tree
WHEEL_B = "build/wheel"                          # the wheel's build tree, relative to ROOT
SONAME = "libckpt.so.0"
NATIVE = "libckpt/_native"                       # where the wheel puts the libraries
ZIP_TIME = (1980, 1, 1, 0, 0, 0)                 # fixed: the same inputs give the same wheel
# pip makes bin/ckptctl, which runs the ckptctl program the wheel carries in NATIVE
ENTRY_POINTS = "[console_scripts]\nckptctl = libckpt._ckptctl:main\n"


def _fail(msg):
    """Stops the build with one line and no traceback (pip shows the backend's output)."""
    raise SystemExit("libckpt build: " + msg)


def _toml():
    try:
        import tomllib
    except ImportError:
        try:
            import tomli as tomllib
        except ImportError:
            _fail("reading pyproject.toml needs Python 3.11+ (tomllib) or the tomli package")
    return tomllib


def project():
    """pyproject.toml's [project] table."""
    with open(PYDIR / "pyproject.toml", "rb") as f:
        return _toml().load(f)["project"]


def _makefile_version():
    text = (ROOT / "Makefile").read_text()
    parts = [re.search(rf"^VERSION_{k} := (\d+)$", text, re.M) for k in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(m.group(1) for m in parts) if all(parts) else None


def _check_source_tree(proj):
    """The C sources must be beside python/, and their version the package's."""
    if not all((ROOT / p).is_file() for p in ("Makefile", "lib/libckpt.map", "include/ckpt.h")):
        _fail(f"{PYDIR} is not inside a libckpt source tree (no Makefile, lib/ and include/ in "
              f"{ROOT}), so libckpt.so cannot be built: run `pip install ./python` in a libckpt "
              "checkout, or install the library with `make install` there")
    mk = _makefile_version()
    if mk != proj["version"]:
        _fail(f"python/pyproject.toml's version {proj['version']} is not the Makefile's {mk}")


def metadata(proj):
    """The METADATA file (core metadata 2.1) for pyproject's [project]."""
    lines = ["Metadata-Version: 2.1", f"Name: {proj['name']}", f"Version: {proj['version']}"]
    if "description" in proj:
        lines.append(f"Summary: {proj['description']}")
    if "requires-python" in proj:
        lines.append(f"Requires-Python: {proj['requires-python']}")
    lines += [f"Classifier: {c}" for c in proj.get("classifiers", [])]
    lines += [f"Requires-Dist: {d}" for d in proj.get("dependencies", [])]
    for extra, deps in proj.get("optional-dependencies", {}).items():
        lines.append(f"Provides-Extra: {extra}")
        lines += [f'Requires-Dist: {d}; extra == "{extra}"' for d in deps]
    body = ""
    if "readme" in proj:
        lines.append("Description-Content-Type: text/markdown")
        body = "\n" + (PYDIR / proj["readme"]).read_text(encoding="utf-8")
    return "\n".join(lines) + "\n" + body


def _tag():
    return "py3-none-" + re.sub(r"[-.]", "_", sysconfig.get_platform())


def _wheel_file(tag):
    return f"Wheel-Version: 1.0\nGenerator: libckpt_build\nRoot-Is-Purelib: false\nTag: {tag}\n"


def _make(*args):
    """Runs make in the source tree (its output goes to the caller's terminal or log)."""
    cmd = ["make", "-C", str(ROOT), "--no-print-directory", f"B={WHEEL_B}", "SANITIZE="]
    if "MAKEFLAGS" not in os.environ:  # run by pip, not by make: use the CPUs
        cmd.append(f"-j{os.cpu_count() or 1}")
    try:
        return subprocess.run(cmd + list(args), check=True, stdout=sys.stderr).returncode
    except FileNotFoundError:
        _fail("`make` is not installed (the library is built with make and a C compiler: "
              "`sh tools/install-deps.sh build` as root installs what it needs)")
    except subprocess.CalledProcessError as e:
        _fail(f"`{' '.join(e.cmd)}` failed (exit {e.returncode}; its output is above; "
              "`sh tools/install-deps.sh build` as root installs the build packages)")


def _check_library(path, soname):
    """What the wheel carries must load from the package directory, without sanitizer runtimes:
    its soname, no rpath, no libasan/libtsan/libubsan."""
    try:
        out = subprocess.run(["readelf", "-d", str(path)], check=True, capture_output=True,
                             text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        _fail(f"cannot read {path} with readelf (binutils): {e}")
    names = re.findall(r"\((SONAME|RPATH|RUNPATH|NEEDED)\).*\[(.*)\]", out)
    if soname is not None and ("SONAME", soname) not in names:
        _fail(f"{path}: soname is not {soname}")
    # a program (soname None) keeps ckptctl's runpath, $ORIGIN/../lib, which finds nothing
    # in the package: its entry point sets LD_LIBRARY_PATH
    bad = [v for k, v in names if (soname is not None and k in ("RPATH", "RUNPATH")) or
           re.match(r"lib[atm]?san|libubsan", v)]
    if bad:
        _fail(f"{path} needs {', '.join(bad)}: not a library to ship (built with sanitizer or rpath "
              f"flags, e.g. from CFLAGS or LDFLAGS; remove {ROOT / WHEEL_B} and build again without them)")


def build_library():
    """Builds the libraries into build/wheel and returns {name in the wheel: path}."""
    _make("python-lib")
    listed = subprocess.run(["make", "-s", "-C", str(ROOT), "--no-print-directory",
                             f"B={WHEEL_B}", "python-lib-files"],
                            check=True, capture_output=True, text=True).stdout.split()
    files = {}
    for rel in listed:
        path = (ROOT / rel).resolve()  # the soname is a symbolic link to the versioned file
        name = os.path.basename(rel)
        _check_library(path, name)
        files[f"{NATIVE}/{name}"] = path
    if f"{NATIVE}/{SONAME}" not in files:
        _fail(f"`make python-lib-files` did not list {SONAME}: {listed}")
    progs = subprocess.run(["make", "-s", "-C", str(ROOT), "--no-print-directory",
                            f"B={WHEEL_B}", "python-bin-files"],
                           check=True, capture_output=True, text=True).stdout.split()
    for rel in progs:  # ckptctl, run by the package's entry point (libckpt/_ckptctl.py)
        path = (ROOT / rel).resolve()
        _check_library(path, None)
        files[f"{NATIVE}/{os.path.basename(rel)}"] = path
    return files


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def write_wheel(directory, entries, dist_info):
    """Writes the wheel: entries is [(name, bytes, mode)], dist_info {file name: text}. RECORD
    lists every file with its hash and size (pip uninstall removes exactly those)."""
    proj = project()
    tag = _tag()
    name = f"{proj['name']}-{proj['version']}-{tag}.whl"
    di = f"{proj['name']}-{proj['version']}.dist-info"
    files = list(entries)
    files += [(f"{di}/{k}", v.encode(), 0o644) for k, v in sorted(dist_info.items())]
    files.append((f"{di}/WHEEL", _wheel_file(tag).encode(), 0o644))
    record = [_record_line(n, d) for n, d, _ in files] + [f"{di}/RECORD,,"]
    files.append((f"{di}/RECORD", ("\n".join(record) + "\n").encode(), 0o644))
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, name + ".part")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for n, data, mode in files:
            info = zipfile.ZipInfo(n, ZIP_TIME)
            info.external_attr = (0o100000 | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    os.replace(tmp, os.path.join(directory, name))  # never a half-written wheel under its name
    return name


def package_files():
    """[(name in the wheel, bytes, mode)] of the Python package, in a stable order; never a file
    `make install` generates (_installed.py) or a byte-compiled one."""
    out = []
    for p in sorted((PYDIR / "libckpt").rglob("*.py")):
        rel = p.relative_to(PYDIR).as_posix()
        if "__pycache__" in rel or rel == "libckpt/_installed.py":
            continue
        out.append((rel, p.read_bytes(), 0o644))
    return out


# PEP 517 hooks

def get_requires_for_build_wheel(config_settings=None):
    return [] if sys.version_info >= (3, 11) else ["tomli"]


get_requires_for_build_editable = get_requires_for_build_wheel


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    proj = project()
    _check_source_tree(proj)  # fails here, before pip resolves anything, without C sources
    di = f"{proj['name']}-{proj['version']}.dist-info"
    os.makedirs(os.path.join(metadata_directory, di), exist_ok=True)
    for fname, text in (("METADATA", metadata(proj)), ("WHEEL", _wheel_file(_tag()))):
        with open(os.path.join(metadata_directory, di, fname), "w", encoding="utf-8") as f:
            f.write(text)
    return di


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    proj = project()
    _check_source_tree(proj)
    libs = [(n, Path(p).read_bytes(), 0o755) for n, p in sorted(build_library().items())]
    return write_wheel(wheel_directory, package_files() + libs,
                       {"METADATA": metadata(proj), "entry_points.txt": ENTRY_POINTS})


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """PEP 660: a .pth that puts python/ on sys.path, so that the source tree's package is the one
    imported (edits take effect without reinstalling); it loads the source tree's library
    (build/lib after `make`, else the build/wheel one built here: _lib.py's search)."""
    proj = project()
    _check_source_tree(proj)
    build_library()
    pth = (f"{proj['name']}_editable.pth", (str(PYDIR) + "\n").encode(), 0o644)
    return write_wheel(wheel_directory, [pth],
                       {"METADATA": metadata(proj), "entry_points.txt": ENTRY_POINTS})


def build_sdist(sdist_directory, config_settings=None):
    _fail("no sdist: the package carries libckpt.so, built from the whole libckpt source tree; "
          "build a wheel instead (`make wheel`, or `pip wheel ./python` in a libckpt checkout)")


def main(argv):
    if len(argv) != 3 or argv[1] != "wheel":
        print(f"usage: {argv[0]} wheel DIRECTORY", file=sys.stderr)
        return 2
    name = build_wheel(argv[2])
    print(os.path.join(argv[2], name))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
