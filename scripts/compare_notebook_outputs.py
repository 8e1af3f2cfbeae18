#!/usr/bin/env python3
"""Compares a freshly executed notebook with the committed one, output by output; exits 1 on
a difference. With --bless, writes the executed notebook over the committed one instead.

    python scripts/compare_notebook_outputs.py COMMITTED.ipynb EXECUTED.ipynb [--bless]

The notebooks in notebooks/ are committed *with* their outputs, so that a reader browsing the
repository sees what a run shows; run-notebooks.sh executes each one afresh and calls this
script, so a committed output that the code no longer produces fails CI. Refresh them with
`NOTEBOOK_BLESS=1 bash scripts/run-notebooks.sh`.

What is compared, per code cell in order (the cells' sources must match too):
  * stdout and results (`execute_result`, `display_data`), each MIME type's data as text;
  * consecutive stream outputs are joined first (the kernel cuts its stdout where timing
    happens to fall), and stderr is left out (compiler warnings come and go; errors on
    stderr fail in check_notebook_outputs.py already);
  * before comparing, text is masked: the checkout's own path (CI runs in a fresh clone
    elsewhere; --bless stores it masked too) becomes «repo», memory addresses (0x and 8+ hex digits), durations
    (a number followed by ns, µs, us, ms or s) and rates (… tok/s, GB/s, GFLOP/s, MB/s)
    become «…»; a cell whose metadata has `llm_anatomy.volatile: true` (timings of the
    benchmark) has every number and instruction-set name (avx2+fma, avx512f, ...) masked and
    its runs of blanks collapsed (column padding).
Execution counts and metadata are not compared. --bless strips nbconvert's per-cell timing
metadata (`metadata.execution`) so that the committed file changes only when outputs do.
"""

import os
import re
import sys

import nbformat

ADDRESS = re.compile(r"0x[0-9a-fA-F]{8,}")
DURATION = re.compile(r"\d+(?:\.\d+)?(?:e[-+]?\d+)?\s?(?:ns|µs|us|ms|s)\b")
RATE = re.compile(r"\d+(?:\.\d+)?(?:e[-+]?\d+)?\s?(?:tok/s|tokens/s|GB/s|MB/s|GFLOP/s)")
NUMBER = re.compile(r"[-+]?\d+(?:[.,]\d+)*(?:e[-+]?\d+)?")
# The instruction set a kernel ran with ("avx2+fma", "avx512f", "avx512_bf16", ...): in a
# volatile cell it names the machine, not the code.
ISA = re.compile(r"\bavx[0-9a-z_]*(?:\+[0-9a-z_]+)*")


REPO = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))


def mask_repo(text):
    return text.replace(REPO, "«repo»")


def mask(text, volatile):
    text = mask_repo(text)
    text = ADDRESS.sub("«addr»", text)
    text = RATE.sub("«rate»", text)
    text = DURATION.sub("«time»", text)
    if volatile:
        # Numbers change, and with them the padding of right-aligned columns; the kernels'
        # instruction sets change with the CPU.
        text = ISA.sub("«isa»", text)
        text = NUMBER.sub("«n»", text)
        text = re.sub(r"[ \t]+", " ", text)
    return text


def as_text(value):
    return value if isinstance(value, str) else "".join(value)


def shown(cell):
    """The cell's comparable outputs: a list of (kind, text) after joining and masking."""
    volatile = bool(cell.metadata.get("llm_anatomy", {}).get("volatile"))
    out = []
    for output in cell.get("outputs", []):
        kind = output.get("output_type")
        if kind == "stream":
            if output.get("name") != "stdout":
                continue
            text = as_text(output.get("text", ""))
            if out and out[-1][0] == "stdout":
                out[-1] = ("stdout", out[-1][1] + text)
            else:
                out.append(("stdout", text))
        elif kind in ("execute_result", "display_data"):
            for mime, data in sorted(output.get("data", {}).items()):
                out.append((mime, as_text(data)))
        elif kind == "error":
            out.append(("error", f"{output.get('ename')}: {output.get('evalue')}"))
    return [(k, mask(t, volatile)) for k, t in out]


def code_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code" and c.source.strip()]


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i, x, y
    return min(len(a), len(b)), "", ""


def compare(committed_path, executed_path):
    committed = nbformat.read(committed_path, as_version=4)
    executed = nbformat.read(executed_path, as_version=4)
    failures = []
    old_cells, new_cells = code_cells(committed), code_cells(executed)
    if [c.source for c in old_cells] != [c.source for c in new_cells]:
        return ["the executed notebook's code cells differ from the committed ones"]
    for index, (old, new) in enumerate(zip(old_cells, new_cells)):
        where = f"code cell {index} ({old.source.strip().splitlines()[0][:50]!r})"
        before, after = shown(old), shown(new)
        if not before and after:
            failures.append(f"{where}: committed without outputs (run with NOTEBOOK_BLESS=1)")
            continue
        if before == after:
            continue
        if [k for k, _ in before] != [k for k, _ in after]:
            failures.append(f"{where}: outputs {[k for k, _ in before]} committed, "
                            f"{[k for k, _ in after]} now")
            continue
        for (kind, old_text), (_, new_text) in zip(before, after):
            if old_text != new_text:
                at, x, y = first_difference(old_text.splitlines(), new_text.splitlines())
                failures.append(f"{where}: {kind} differs at line {at + 1}:\n"
                                f"    committed: {x[:200]!r}\n    now:       {y[:200]!r}")
                break
    return failures


def bless(committed_path, executed_path):
    nb = nbformat.read(executed_path, as_version=4)
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        for output in cell.get("outputs", []):
            if "text" in output:
                output["text"] = mask_repo(as_text(output["text"]))
            for mime, data in output.get("data", {}).items():
                if isinstance(data, (str, list)):
                    output["data"][mime] = mask_repo(as_text(data))
    nbformat.write(nb, committed_path)


def main(args):
    flags = [a for a in args if a.startswith("--")]
    paths = [a for a in args if not a.startswith("--")]
    if len(paths) != 2 or set(flags) - {"--bless"}:
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        return 2
    committed, executed = paths
    if "--bless" in flags:
        bless(committed, executed)
        print(f"{committed}: outputs written")
        return 0
    failures = compare(committed, executed)
    for failure in failures:
        print(f"{committed}: FAIL: {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
