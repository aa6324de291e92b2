"""cddp_wheel.py - the PEP 517 build backend of pyproject.toml: `make lib cli`, then `make install`
into a staging folder, packed as a wheel whose .data puts bin/cddp, libexec/cddp/cddp-full (the
commands with BLAS and MPI, which bin/cddp runs), lib/libcddp*, include/cddp and
lib/pkgconfig/cddp.pc into the Python environment's prefix (a venv's bin/ is on its PATH).
Environment: CDDP_WHEEL_BUILD (make's BUILD, default build-wheel), CDDP_WHEEL_MAKEFLAGS
(more make variables, e.g. WERROR=1), CDDP_WHEEL_JOBS. The binary links libcddp statically; it needs the system's libraries that make found (BLAS,
YAML, OpenSSL, Open MPI when present), so the wheel is tagged for this platform, not manylinux."""
import base64
import hashlib
import os
import re
import subprocess
import sys
import sysconfig
import tempfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NAME = "cddp"


def _version():
    with open(os.path.join(ROOT, "Makefile")) as f:
        m = re.search(r"^VERSION\s*:=\s*(\S+)", f.read(), re.M)
    if not m:
        raise RuntimeError("cddp_wheel: no VERSION := line in the Makefile")
    return m.group(1)


def _tag():
    plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return f"py3-none-{plat}"


def _metadata(version):
    return (f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {version}\n"
            "Summary: Multi-node data-parallel training in C: a torchrun-compatible launcher (cddp run)\n"
            "Requires-Python: >=3.8\n")


def _stage(dest):
    """Builds the library and the command, installs them under dest (prefix /)."""
    # its own build folder, apart from a developer's build/ (whose flags may differ: make would
    # rebuild it); CDDP_WHEEL_BUILD / CDDP_WHEEL_MAKEFLAGS let CI reuse the suite's build
    jobs = os.environ.get("CDDP_WHEEL_JOBS", str(os.cpu_count() or 1))
    build = os.environ.get("CDDP_WHEEL_BUILD", "build-wheel")
    make = ["make", "-C", ROOT, f"-j{jobs}", f"BUILD={build}"] + os.environ.get("CDDP_WHEEL_MAKEFLAGS", "").split()
    subprocess.run(make + ["lib", "cli"], check=True, stdout=sys.stderr)
    subprocess.run(make + ["install", "PREFIX=/", f"DESTDIR={dest}"], check=True, stdout=sys.stderr)
    pc = os.path.join(dest, "lib", "pkgconfig", "cddp.pc")  # relocatable: wherever the venv is
    with open(pc) as f:
        text = re.sub(r"^prefix=.*$", "prefix=${pcfiledir}/../..", f.read(), count=1, flags=re.M)
    with open(pc, "w") as f:
        f.write(text)


def get_requires_for_build_wheel(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    version = _version()
    info = f"{NAME}-{version}.dist-info"
    os.makedirs(os.path.join(metadata_directory, info), exist_ok=True)
    with open(os.path.join(metadata_directory, info, "METADATA"), "w") as f:
        f.write(_metadata(version))
    return info


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    version = _version()
    data, info = f"{NAME}-{version}.data", f"{NAME}-{version}.dist-info"
    wheel = f"{NAME}-{version}-{_tag()}.whl"
    record = []

    def add(zf, arc, payload, mode=0o644):
        zi = zipfile.ZipInfo(arc, date_time=(2026, 1, 1, 0, 0, 0))
        zi.external_attr = (0o100000 | mode) << 16
        zi.compress_type = zipfile.ZIP_DEFLATED
        zf.writestr(zi, payload)
        digest = base64.urlsafe_b64encode(hashlib.sha256(payload).digest()).rstrip(b"=").decode()
        record.append(f"{arc},sha256={digest},{len(payload)}")

    with tempfile.TemporaryDirectory() as stage, zipfile.ZipFile(os.path.join(wheel_directory, wheel), "w") as zf:
        _stage(stage)
        for top, where in (("bin", "scripts"), ("libexec", "data/libexec"), ("lib", "data/lib"),
                           ("include", "data/include")):
            for dirpath, _, files in os.walk(os.path.join(stage, top)):
                for name in sorted(files):
                    path = os.path.join(dirpath, name)
                    rel = os.path.relpath(path, os.path.join(stage, top))
                    with open(path, "rb") as f:  # a symlink (libcddp.so -> .so.0) becomes a copy
                        payload = f.read()
                    add(zf, f"{data}/{where}/{rel}", payload, 0o755 if os.access(path, os.X_OK) else 0o644)
        add(zf, f"{info}/METADATA", _metadata(version).encode())
        add(zf, f"{info}/WHEEL", f"Wheel-Version: 1.0\nGenerator: cddp_wheel\nRoot-Is-Purelib: false\nTag: {_tag()}\n".encode())
        record.append(f"{info}/RECORD,,")
        zi = zipfile.ZipInfo(f"{info}/RECORD", date_time=(2026, 1, 1, 0, 0, 0))
        zf.writestr(zi, "\n".join(record) + "\n")
    return wheel
