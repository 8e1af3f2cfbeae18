#!/usr/bin/env python3
"""Checks executed evcxr notebooks; exits 1 when any of them failed.

    python scripts/check_notebook_outputs.py EXECUTED.ipynb...

`jupyter nbconvert --execute` only fails on a compile error (an "error" output stops it). A
panic, a failed `assert!` or a `?` on an `Err` in a cell does not stop it: evcxr writes the
message to the cell's stderr stream and the next cells run. So the outputs decide. The rule:

A notebook FAILS when
  1. its kernelspec is not "rust";
  2. a non-empty code cell was not executed (no execution_count: the kernel died or the run
     stopped early);
  3. a cell has an output of type "error" (compile errors, evcxr command errors);
  4. a cell's stderr stream contains a panic or an error: a line matching ERROR_PATTERNS
     (`panicked at`, `Error:` / `error:` / `error[E…]` at the start of a line, a terminated or
     crashed child process);
  5. a cell lacks its expected output: every code cell that is not only `:` commands (such as
     `:dep`) and comments must show something besides stderr (stdout, a value, a figure), and
     each entry of its metadata `llm_anatomy.expect` must be present, where an entry holding
     a "/" (e.g. "image/svg+xml") is a MIME type of a display or result output and any other
     entry is text that must appear in the cell's stdout or text/plain output. A cell that
     really shows nothing says so with metadata `llm_anatomy.no_output: true`.

Other stderr text (a library's progress bar, a `warning:` line) is printed as a note and does
not fail the run. evcxr itself does not put compiler warnings or cargo's build log into the
notebook: those go to the kernel's console, which run-notebooks.sh keeps in NAME.log.
"""

import re
import sys

import nbformat

ERROR_PATTERNS = re.compile(
    r"panicked at"
    r"|^\s*(Error|error)(\[E\d+\])?:"
    r"|Child process terminated"
    r"|Segmentation fault|SIGSEGV|SIGABRT|stack overflow"
    r"|memory allocation of \d+ bytes failed",
    re.MULTILINE,
)


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
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or not cell.source.strip():
            continue
        where = f"cell {index} ({cell.source.strip().splitlines()[0][:50]!r})"
        if cell.get("execution_count") is None:
            failures.append(f"{where}: not executed")
            continue
        shown, mimes = [], set()
        for output in cell.get("outputs", []):
            kind = output.get("output_type")
            text = text_of(output)
            if kind == "error":
                failures.append(f"{where}: error output: {text.strip()[:300]}")
            elif kind == "stream" and output.get("name") == "stderr":
                if ERROR_PATTERNS.search(text):
                    failures.append(f"{where}: stderr: {text.strip()[:300]}")
                elif text.strip():
                    notes.append(f"{where}: stderr (not an error): {text.strip()[:200]}")
            else:
                shown.append(text)
                mimes.update(output.get("data", {}).keys())
        meta = cell.metadata.get("llm_anatomy", {})
        if not meta.get("no_output") and not only_commands(cell.source) and not shown:
            failures.append(f"{where}: expected output missing (the cell showed nothing)")
        all_text = "".join(shown)
        for want in meta.get("expect", []):
            found = want in mimes if "/" in want else want in all_text
            if not found:
                failures.append(f"{where}: expected output missing: {want!r}")
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
