#!/usr/bin/env python3
"""Checks executed evcxr notebooks; exits 1 when any of them failed.

    python scripts/check_notebook_outputs.py EXECUTED.ipynb...

`jupyter nbconvert --execute` does not fail on what goes wrong at run time in an evcxr cell:
a panic, a failed `assert!` or a `?` on an `Err` only writes to stderr and the next cells run
(and with --allow-errors, which run-notebooks.sh uses, a compile error does not stop it
either). So the outputs decide. What evcxr 0.22 puts into a notebook (checked by probing):

* compile errors and evcxr command errors (a bad `:dep`): an output of type "error";
* compiler warnings and cargo's build log: nothing (they stay on the kernel's console);
* a panic: "thread '…' panicked at …" and a backtrace on the cell's stderr stream;
* a `?` on an `Err`: only the error's Display text on stderr, with no prefix, and delivered
  late: it lands in the *next* cell's outputs, or nowhere when it was the last cell;
* `eprintln!` from the cell or the library: stderr text as written.

A notebook FAILS when
  1. its kernelspec is not "rust";
  2. a non-empty code cell was not executed (no execution_count: the kernel died or the run
     stopped early);
  3. a cell has an output of type "error";
  4. a cell's stderr holds anything but warnings: its text (all stderr outputs of the cell
     joined) fails unless every non-blank line starts with "warning" (any case). Since a `?`
     error carries no marker, unknown stderr text counts as an error; a panic is reported as
     such;
  5. a cell lacks its expected output: every code cell that is not only `:` commands (such as
     `:dep`) and comments must show something besides stderr (stdout, a value, a figure),
     and each entry of its metadata `llm_anatomy.expect` must be present, where an entry
     holding a "/" (e.g. "image/svg+xml") is the MIME type of a display or result output and
     any other entry is text that must appear in the cell's stdout or text/plain output. A
     cell that really shows nothing says so with metadata `llm_anatomy.no_output: true`;
  6. the last code cell has no `llm_anatomy.expect`: an error there would leave no trace
     (see `?` above), so the final cell must print a declared line after its checks.
"""

import re
import sys

import nbformat

PANIC = re.compile(r"panicked at|stack overflow|memory allocation of \d+ bytes failed")
WARNING_LINE = re.compile(r"^\s*warning\b", re.IGNORECASE)


def judge_stderr(text):
    """None when stderr text is only warnings, else a description of the failure."""
    lines = [line for line in text.splitlines() if line.strip()]
    if all(WARNING_LINE.match(line) for line in lines):
        return None
    if PANIC.search(text):
        first = next(line for line in lines if PANIC.search(line))
        message = lines[lines.index(first) + 1] if lines.index(first) + 1 < len(lines) else ""
        return f"panic: {first.strip()} {message.strip()}"
    return ("stderr (an error; the message of a `?` error arrives one cell late): "
            + " | ".join(lines)[:300])


def text_of(output):
    """The text an output shows: stream text, text/plain, or an error's name and value."""
    kind = output.get("output_type")
    if kind == "stream":
        return output.get("text", "")
    if kind in ("display_data", "execute_result"):
        plain = output.get("data", {}).get("text/plain", "")
        return plain if isinstance(plain, str) else "".join(plain)
    if kind == "error":
        return f"{output.get('ename', '')}: {output.get('evalue', '')}"
    return ""


def only_commands(source):
    """True when the cell holds nothing but evcxr `:` commands, comments and blank lines."""
    for line in source.splitlines():
        line = line.strip()
        if line and not line.startswith(":") and not line.startswith("//"):
            return False
    return True


def check(path):
    """Returns (failures, notes) for one executed notebook."""
    failures, notes = [], []
    nb = nbformat.read(path, as_version=4)
    kernel = nb.metadata.get("kernelspec", {}).get("name")
    if kernel != "rust":
        failures.append(f"kernelspec is {kernel!r}, not 'rust'")
    code_cells = [(i, c) for i, c in enumerate(nb.cells)
                  if c.cell_type == "code" and c.source.strip()]
    for index, cell in code_cells:
        where = f"cell {index} ({cell.source.strip().splitlines()[0][:50]!r})"
        if cell.get("execution_count") is None:
            failures.append(f"{where}: not executed")
            continue
        shown, mimes, stderr = [], set(), []
        for output in cell.get("outputs", []):
            kind = output.get("output_type")
            if kind == "error":
                failures.append(f"{where}: error output: {text_of(output).strip()[:300]}")
            elif kind == "stream" and output.get("name") == "stderr":
                stderr.append(text_of(output))
            else:
                shown.append(text_of(output))
                mimes.update(output.get("data", {}).keys())
        stderr_text = "".join(stderr)
        problem = judge_stderr(stderr_text)
        if problem:
            failures.append(f"{where}: {problem}")
        elif stderr_text.strip():
            notes.append(f"{where}: warning on stderr: {stderr_text.strip()[:200]}")
        meta = cell.metadata.get("llm_anatomy", {})
        if not meta.get("no_output") and not only_commands(cell.source) and not shown:
            failures.append(f"{where}: expected output missing (the cell showed nothing)")
        all_text = "".join(shown)
        for want in meta.get("expect", []):
            found = want in mimes if "/" in want else want in all_text
            if not found:
                failures.append(f"{where}: expected output missing: {want!r}")
    if code_cells and not code_cells[-1][1].metadata.get("llm_anatomy", {}).get("expect"):
        failures.append(f"cell {code_cells[-1][0]}: the last code cell declares no "
                        "llm_anatomy.expect output")
    return failures, notes


def main(paths):
    if not paths:
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        return 2
    bad = 0
    for path in paths:
        try:
            failures, notes = check(path)
        except (OSError, ValueError) as err:  # unreadable or not a notebook
            failures, notes = [f"cannot read: {err}"], []
        for note in notes:
            print(f"{path}: note: {note}")
        for failure in failures:
            print(f"{path}: FAIL: {failure}")
        bad += bool(failures)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
