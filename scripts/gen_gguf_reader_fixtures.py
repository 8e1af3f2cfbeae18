"""Fixtures for tests/gguf.rs: small GGUF files written by gguf-py's GGUFWriter, and what
gguf-py's GGUFReader reads back from each.

Run: /work/peers/llama/bin/python scripts/gen_gguf_reader_fixtures.py
Writes tests/fixtures/gguf_reader/{values,quant,empty}.gguf and one <name>.json per file.
Generated with gguf 0.19.0 and numpy (versions recorded in every JSON file).

Each JSON file holds, per metadata pair, what the script gave the writer ("written": the
value type, the element types of arrays, the value with nested arrays kept nested) and
what GGUFReader read ("read_types": ReaderField.types by name, "read": ReaderField.contents()
— gguf-py flattens nested arrays there); per tensor, GGUFReader's name, dims (ggml order),
type, absolute data offset and byte count. The tensor bytes are random but valid: legacy
blocks come from gguf.quants.quantize, Q4_K blocks are random bytes with finite f16 scales.
"""
import json
import os

import numpy as np

import gguf
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as V

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "gguf_reader")
VERSIONS = {"gguf": "0.19.0", "numpy": np.__version__}
rng = np.random.default_rng(20261202)


def add(w, log, key, value, vtype, sub_type=None):
    """One metadata pair, given to the writer and remembered as written."""
    w.add_key_value(key, value, vtype, sub_type=sub_type)
    log.append({"key": key, "type": vtype.name, "sub_type": sub_type.name if sub_type is not None else None, "value": value})


def finite_k_blocks(rows, blocks, block_bytes):
    """Random bytes for K-quant blocks whose two leading f16 scales (d, dmin) are finite."""
    raw = rng.integers(0, 256, size=(rows, blocks, block_bytes), dtype=np.uint8)
    scales = rng.uniform(-0.01, 0.01, size=(rows, blocks, 2)).astype(np.float16)
    raw[:, :, 0:4] = scales.view(np.uint8).reshape(rows, blocks, 4)
    return raw.reshape(rows, blocks * block_bytes)


def write(name, fill):
    path = os.path.join(OUT, name + ".gguf")
    w = gguf.GGUFWriter(path, arch="anatomy-test")
    log = [{"key": "general.architecture", "type": "STRING", "sub_type": None, "value": "anatomy-test"}]
    fill(w, log)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    r = gguf.GGUFReader(path)
    fields = []
    for key, f in r.fields.items():
        if key.startswith("GGUF."):
            continue
        fields.append({"key": key, "read_types": [t.name for t in f.types], "read": f.contents()})
    tensors = [
        {
            "name": t.name,
            "dims": [int(d) for d in t.shape],
            "type": int(t.tensor_type),
            "type_name": t.tensor_type.name,
            "data_offset": int(t.data_offset),
            "relative_offset": int(t.data_offset) - int(r.data_offset),
            "n_bytes": int(t.n_bytes),
        }
        for t in r.tensors
    ]
    doc = {
        "versions": VERSIONS,
        "file": name + ".gguf",
        "version": int(r.fields["GGUF.version"].contents()),
        "alignment": int(r.alignment),
        "data_offset": int(r.data_offset),
        "file_size": os.path.getsize(path),
        "written": log,
        "fields": fields,
        "tensors": tensors,
    }
    with open(os.path.join(OUT, name + ".json"), "w") as fh:
        json.dump(doc, fh, indent=1)
        fh.write("\n")


def values(w, log):
    """Every value type, arrays of each kind, nested arrays; float tensors, 32-byte alignment."""
    add(w, log, "t.u8", 200, V.UINT8)
    add(w, log, "t.i8", -100, V.INT8)
    add(w, log, "t.u16", 60000, V.UINT16)
    add(w, log, "t.i16", -30000, V.INT16)
    add(w, log, "t.u32", 4000000000, V.UINT32)
    add(w, log, "t.i32", -2000000000, V.INT32)
    add(w, log, "t.f32", 0.1, V.FLOAT32)
    add(w, log, "t.bool.true", True, V.BOOL)
    add(w, log, "t.bool.false", False, V.BOOL)
    add(w, log, "t.string", "héllo, 世界 ✓", V.STRING)
    add(w, log, "t.empty_string", "", V.STRING)
    add(w, log, "t.u64", 18000000000000000000, V.UINT64)
    add(w, log, "t.i64", -9000000000000000000, V.INT64)
    add(w, log, "t.f64", -1.0e-300, V.FLOAT64)
    add(w, log, "t.arr.strings", ["a", "", "ĠHello", "<|im_end|>"], V.ARRAY)
    add(w, log, "t.arr.i32", [1, -2, 3], V.ARRAY)
    add(w, log, "t.arr.u64", [1, 2, 2**63], V.ARRAY, sub_type=V.UINT64)
    add(w, log, "t.arr.u8", [0, 255], V.ARRAY, sub_type=V.UINT8)
    add(w, log, "t.arr.f32", [0.5, -1.25, 3.0e38], V.ARRAY)
    add(w, log, "t.arr.f64", [1.0e-10, 2.5], V.ARRAY, sub_type=V.FLOAT64)
    add(w, log, "t.arr.bool", [True, False, True], V.ARRAY)
    add(w, log, "t.arr.nested_ints", [[1, 2], [3]], V.ARRAY)
    add(w, log, "t.arr.nested_strings", [["x"], ["y", "zz"]], V.ARRAY)
    add(w, log, "t.arr.nested_mixed", [[1, 2], ["s"]], V.ARRAY)
    add(w, log, "t.arr.nested_deep", [[[7], [8, 9]], [[10]]], V.ARRAY)
    w.add_tensor("f32.matrix", rng.standard_normal((3, 5)).astype(np.float32))
    w.add_tensor("f16.vector", rng.standard_normal(7).astype(np.float16))
    w.add_tensor("f32.scalar", np.array(2.5, dtype=np.float32))
    bf = gguf.quants.quantize(rng.standard_normal((2, 8)).astype(np.float32), Q.BF16)
    w.add_tensor("bf16.matrix", bf, raw_dtype=Q.BF16)
    w.add_tensor("f32.cube", rng.standard_normal((2, 3, 4)).astype(np.float32))


def quant(w, log):
    """Block-quantised tensors (Q8_0, Q4_0, Q4_K), 4-D and 3-D shapes, alignment 64."""
    w.add_custom_alignment(64)
    log.append({"key": "general.alignment", "type": "UINT32", "sub_type": None, "value": 64})
    add(w, log, "general.name", "quantised", V.STRING)
    q8 = gguf.quants.quantize(rng.standard_normal((3, 64)).astype(np.float32), Q.Q8_0)
    w.add_tensor("blk.0.q8_0", q8, raw_dtype=Q.Q8_0)
    q4 = gguf.quants.quantize(rng.standard_normal((2, 1, 32)).astype(np.float32), Q.Q4_0)
    w.add_tensor("blk.0.q4_0", q4, raw_dtype=Q.Q4_0)
    k = finite_k_blocks(2, 2, 144)
    w.add_tensor("blk.0.q4_k", k, raw_dtype=Q.Q4_K)
    w.add_tensor("blk.0.f32_4d", rng.standard_normal((1, 2, 1, 3)).astype(np.float32))
    k6 = finite_k_blocks(1, 1, 210)
    # Q6_K keeps its one f16 scale at the end of the block.
    k6[:, 208:210] = np.array([0.003], dtype=np.float16).view(np.uint8)
    w.add_tensor("blk.0.q6_k", k6, raw_dtype=Q.Q6_K)


def empty(w, log):
    """No tensors and one more key: the header is the whole file (padded)."""
    add(w, log, "general.description", "no tensors", V.STRING)


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    write("values", values)
    write("quant", quant)
    write("empty", empty)
