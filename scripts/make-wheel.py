"""A Python wheel that installs the `strata` command, written from an already built binary.

    python3 scripts/make-wheel.py BINARY OUTDIR

Writes OUTDIR/strata_memory-<version>-py3-none-<platform>.whl and prints its path. The wheel
is what `maturin build --release -b bin --compatibility linux` makes from this repository's
pyproject.toml (the command under `*.data/scripts/`, and METADATA, WHEEL and RECORD in
`*.dist-info/`), but from a binary the test run has already built, so the test command does
not build the workspace a second time. Release wheels come from maturin.

The binary is copied without symbols or debug information (`strip --strip-all`, as maturin's
`strip = true` does; strip comes from binutils, which linking Rust already needs). The version is the workspace's, from Cargo.toml. Standard
library only; the output is deterministic for a given binary.
"""
import base64
import hashlib
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile

DISTRIBUTION = "strata-memory"
SUMMARY = ("strata's memory tools for PyTorch users: explain an out-of-memory from a "
           "snapshot, replay it under other allocator settings, and draw it as one page")
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
# Zip entries carry this time (the earliest a zip can hold), so equal inputs give equal wheels.
EPOCH = (1980, 1, 1, 0, 0, 0)


def workspace_version():
    with open(os.path.join(ROOT, "Cargo.toml"), encoding="utf-8") as f:
        text = f.read()
    section = re.search(r"^\[workspace\.package\]\n(.*?)(?=^\[)", text, re.S | re.M)
    match = section and re.search(r'^version\s*=\s*"([^"]+)"', section.group(1), re.M)
    if not match:
        sys.exit("make-wheel.py: no version in Cargo.toml's [workspace.package]")
    return match.group(1)


def platform_tag():
    return re.sub(r"[^A-Za-z0-9]", "_", sysconfig.get_platform())


def record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def add(z, name, data, executable=False):
    info = zipfile.ZipInfo(name, EPOCH)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = (0o100755 if executable else 0o100644) << 16
    z.writestr(info, data)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    binary, out = sys.argv[1], sys.argv[2]
    if not os.path.isfile(binary):
        sys.exit(f"make-wheel.py: {binary} is not a file; build it first "
                 "(cargo build --release -p strata-cli)")
    if shutil.which("strip") is None:
        sys.exit("make-wheel.py: `strip` is missing; install binutils (apt-get install binutils)")
    with tempfile.TemporaryDirectory() as tmp:
        stripped = os.path.join(tmp, "strata")
        shutil.copyfile(binary, stripped)
        subprocess.run(["strip", "--strip-all", stripped], check=True)
        with open(stripped, "rb") as f:
            command = f.read()
    version = workspace_version()
    name = DISTRIBUTION.replace("-", "_")
    tag = f"py3-none-{platform_tag()}"
    dist_info = f"{name}-{version}.dist-info"
    metadata = (
        "Metadata-Version: 2.1\n"
        f"Name: {DISTRIBUTION}\n"
        f"Version: {version}\n"
        f"Summary: {SUMMARY}\n"
        "License: MIT OR Apache-2.0\n"
        "Requires-Python: >=3.8\n"
    ).encode()
    wheel = (
        "Wheel-Version: 1.0\n"
        "Generator: strata scripts/make-wheel.py\n"
        "Root-Is-Purelib: false\n"
        f"Tag: {tag}\n"
    ).encode()
    files = [
        (f"{name}-{version}.data/scripts/strata", command, True),
        (f"{dist_info}/METADATA", metadata, False),
        (f"{dist_info}/WHEEL", wheel, False),
    ]
    record = "".join(record_line(n, d) + "\n" for n, d, _ in files)
    record += f"{dist_info}/RECORD,,\n"
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, f"{name}-{version}-{tag}.whl")
    with zipfile.ZipFile(path, "w") as z:
        for n, d, x in files:
            add(z, n, d, x)
        add(z, f"{dist_info}/RECORD", record.encode())
    print(path)


if __name__ == "__main__":
    main()
