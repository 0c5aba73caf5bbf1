#!/usr/bin/env python3
"""Copies libonnxruntime.so* out of a downloaded onnxruntime(-gpu) wheel.

usage: extract_ort.py WHEEL_DIR DEST_DIR
"""
import sys
import zipfile
from pathlib import Path

wheel_dir, dest = Path(sys.argv[1]), Path(sys.argv[2])
wheels = sorted(wheel_dir.glob("onnxruntime*.whl"))
if not wheels:
    sys.exit(f"extract_ort: no onnxruntime wheel in {wheel_dir}")
dest.mkdir(parents=True, exist_ok=True)
n = 0
with zipfile.ZipFile(wheels[-1]) as z:
    for name in z.namelist():
        base = name.rsplit("/", 1)[-1]
        if name.startswith("onnxruntime/capi/") and base.startswith("libonnxruntime"):
            (dest / base).write_bytes(z.read(name))
            n += 1
if n == 0:
    sys.exit(f"extract_ort: {wheels[-1].name} has no libonnxruntime*.so")
print(f"extract_ort: {n} libraries from {wheels[-1].name} -> {dest}")
