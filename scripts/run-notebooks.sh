#!/usr/bin/env bash
# Executes the evcxr (Rust) Jupyter notebooks headless and fails on any error.
#
#   bash scripts/run-notebooks.sh [NOTEBOOK...]     (default: every notebooks/*.ipynb)
#
# 1. Set-up, idempotent (each step is skipped when already in place):
#    - evcxr_jupyter 0.22.0 via `cargo install --locked` unless `cargo install --list` has it;
#    - a Python venv with pinned Jupyter tools at $NOTEBOOK_VENV, (re)created only when it is
#      missing or a pinned version differs;
#    - the "rust" kernel spec (`evcxr_jupyter --install`) unless it already points at this
#      evcxr_jupyter binary.
# 2. Executes each notebook (NOTEBOOK_JOBS at once, after the first) with `jupyter nbconvert --to notebook --execute --allow-errors`
#    into $NOTEBOOK_OUT (the committed notebook is only read). EVCXR_TMPDIR is a fixed
#    directory, so the crate's dependencies compile once per machine, not once per kernel.
#    --allow-errors keeps going after a compile error so that the executed copy is always
#    written and the check below can name every failing cell; nbconvert itself then fails only
#    on a dead kernel or a timeout.
# 3. Checks the executed copies with scripts/check_notebook_outputs.py. A notebook fails when
#    nbconvert fails or the check fails ("error" outputs such as compile errors, panics or
#    errors on stderr, a cell that was not run or lacks its expected output); the rule is
#    spelled out at the top of that script.
# 4. Compares the executed copy with the committed notebook, which carries its outputs
#    (scripts/compare_notebook_outputs.py: every stdout, result and figure must be what the
#    fresh run shows, with timings, rates and addresses masked). NOTEBOOK_BLESS=1 writes the
#    executed outputs into notebooks/ instead (after the checks of step 3 pass).
#
# Prints one line per notebook with its wall time as it finishes, then `N passed, M failed`; exits 1 when any
# notebook failed, 2 on a set-up failure. Build logs of each kernel go to $NOTEBOOK_OUT/NAME.log.
#
# Environment (all optional):
#   NOTEBOOK_VENV     venv with the Jupyter tools   (default ~/.cache/llm-anatomy/nbvenv)
#   PYTHON            interpreter to create it with (default python3; needs the venv module)
#   EVCXR_TMPDIR      evcxr's build directory       (default <repo>/target/evcxr)
#   NOTEBOOK_OUT      executed copies and logs      (default <repo>/target/notebooks)
#   NOTEBOOK_TIMEOUT  seconds per cell              (default 1200)
#   NOTEBOOK_BLESS    1: refresh the committed outputs instead of comparing with them
#   NOTEBOOK_JOBS     notebooks run at once       (default: the number of cores); each worker
#                     after the first has its own copy of EVCXR_TMPDIR (EVCXR_TMPDIR.2, …)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
EVCXR_VERSION=0.22.0
# What `pip install nbconvert==7.17.2 nbclient==0.11.0` resolved to (Python 3.11, pip 23.2):
# the packages that execute notebooks and talk to the kernel are pinned; the rest of the
# dependency tree (HTML export only) follows from them.
PINS=(
    nbconvert==7.17.2
    nbclient==0.11.0
    jupyter_client==8.10.0
    jupyter_core==5.9.1
    nbformat==5.11.1
    traitlets==5.16.1
    pyzmq==27.3.0
    tornado==6.6.1
)
VENV="${NOTEBOOK_VENV:-$HOME/.cache/llm-anatomy/nbvenv}"
PYTHON="${PYTHON:-python3}"
OUT_DIR="${NOTEBOOK_OUT:-$REPO/target/notebooks}"
TIMEOUT="${NOTEBOOK_TIMEOUT:-1200}"
export EVCXR_TMPDIR="${EVCXR_TMPDIR:-$REPO/target/evcxr}"
# jupyter_core 5 warns on every command unless told to use platformdirs already; on Linux the
# user data directory (where the kernel spec lives) is ~/.local/share/jupyter either way.
export JUPYTER_PLATFORM_DIRS=1
CARGO_BIN="${CARGO_HOME:-$HOME/.cargo}/bin"

die() {
    echo "run-notebooks: $*" >&2
    exit 2
}

# ---------------------------------------------------------------- which notebooks
if [ "$#" -gt 0 ]; then
    NOTEBOOKS=("$@")
else
    shopt -s nullglob
    NOTEBOOKS=("$REPO"/notebooks/*.ipynb)
    shopt -u nullglob
    [ "${#NOTEBOOKS[@]}" -gt 0 ] || die "no notebooks in $REPO/notebooks"
fi

# ---------------------------------------------------------------- evcxr_jupyter
if ! cargo install --list | grep -qx "evcxr_jupyter v$EVCXR_VERSION:"; then
    echo "installing evcxr_jupyter $EVCXR_VERSION (takes 12-20 min on 2 cores)..."
    cargo install evcxr_jupyter --version "$EVCXR_VERSION" --locked ||
        die "cargo install evcxr_jupyter failed"
fi
EVCXR_BIN="$CARGO_BIN/evcxr_jupyter"
[ -x "$EVCXR_BIN" ] || die "$EVCXR_BIN not found (is CARGO_HOME set as for cargo install?)"

# ---------------------------------------------------------------- Jupyter venv
venv_ok() {
    [ -x "$VENV/bin/python" ] && "$VENV/bin/python" - "${PINS[@]}" <<'EOF' 2>/dev/null
import sys
from importlib.metadata import PackageNotFoundError, version

def installed(name):
    try:
        return version(name)
    except PackageNotFoundError:
        return None

sys.exit(any(installed(p.split("==")[0]) != p.split("==")[1] for p in sys.argv[1:]))
EOF
}
if ! venv_ok; then
    echo "creating the Jupyter venv in $VENV..."
    mkdir -p "$(dirname "$VENV")"
    "$PYTHON" -m venv --clear "$VENV" || die "$PYTHON -m venv failed (Debian: apt-get install python3-venv)"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "${PINS[@]}" ||
        die "pip install into $VENV failed"
    venv_ok || die "$VENV does not hold the pinned versions after pip install"
fi
JUPYTER="$VENV/bin/jupyter"

# ---------------------------------------------------------------- the "rust" kernel spec
kernel_ok() {
    "$JUPYTER" kernelspec list --json 2>/dev/null | "$VENV/bin/python" -c '
import json, os, sys
spec = json.load(sys.stdin)["kernelspecs"].get("rust")
argv0 = spec["spec"]["argv"][0] if spec else ""
sys.exit(not (argv0 and os.path.realpath(argv0) == os.path.realpath(sys.argv[1])))
' "$EVCXR_BIN"
}
if ! kernel_ok; then
    echo "installing the rust kernel spec..."
    "$EVCXR_BIN" --install >/dev/null || die "evcxr_jupyter --install failed"
    kernel_ok || die "jupyter does not see the rust kernel after evcxr_jupyter --install"
fi

# ---------------------------------------------------------------- execute and check
mkdir -p "$OUT_DIR" "$EVCXR_TMPDIR"
# evcxr keeps one crate in EVCXR_TMPDIR, so two kernels must not share it at once: serialise
# concurrent runs of this script (several people or jobs on one checkout).
exec 9>"$EVCXR_TMPDIR.lock"
if ! flock -n 9; then
    echo "waiting for another run-notebooks.sh to finish (lock $EVCXR_TMPDIR.lock)..."
    flock 9
fi

# One execution of notebook $1 into OUT_DIR, then its checks; returns non-zero on failure.
run_once() {
    local nb=$1 name log executed
    name="$(basename "$nb" .ipynb)"
    log="$OUT_DIR/$name.log"
    executed="$OUT_DIR/$name.ipynb"
    rm -f "$executed"
    # The kernel's working directory is the notebook's own, so `:dep … path = ".."` finds the
    # crate; only the executed copy goes to OUT_DIR.
    if ! "$JUPYTER" nbconvert --to notebook --execute --allow-errors \
        --ExecutePreprocessor.timeout="$TIMEOUT" \
        --output-dir "$OUT_DIR" --output "$name" "$nb" >"$log" 2>&1; then
        echo "---- $nb: nbconvert failed; end of $log:"
        tail -n 40 "$log"
        return 1
    fi
    "$VENV/bin/python" "$REPO/scripts/check_notebook_outputs.py" "$executed" || return 1
    if [ "${NOTEBOOK_BLESS:-0}" = 1 ]; then
        "$VENV/bin/python" "$REPO/scripts/compare_notebook_outputs.py" "$nb" "$executed" --bless
    else
        "$VENV/bin/python" "$REPO/scripts/compare_notebook_outputs.py" "$nb" "$executed"
    fi
}

# One notebook, with one retry, in the evcxr directory $EVCXR_TMPDIR; prints its report (any
# failure's details, then one PASS/FAIL line with the wall time) in a single write, and
# returns non-zero when it failed.
run_notebook() {
    local nb=$1 start status secs report rc=0
    report="$(
        if [ ! -f "$nb" ]; then
            printf 'FAIL  %-40s (no such file)\n' "$nb"
            exit 1
        fi
        start=$(date +%s.%N)
        status=PASS
        # A failing notebook runs once more: evcxr's kernel can drop a cell's last stdout lines
        # when they reach it after the cell's reply (seen once in 07-optim, 2026-12-03). A real
        # failure fails twice; a second-run pass is reported as such, with the first failure
        # above it.
        if ! run_once "$nb"; then
            echo "---- $nb failed; running it once more"
            if run_once "$nb"; then
                status="PASS (on its second run)"
            else
                status=FAIL
            fi
        fi
        secs=$(echo "$start $(date +%s.%N)" | awk '{printf "%.1f", $2 - $1}')
        printf '%s  %-40s %8s s\n' "$status" "$nb" "$secs"
        [ "$status" != FAIL ]
    )" || rc=$?
    printf '%s\n' "$report"
    return "$rc"
}

# The first notebook runs alone: it compiles the crate and its dependencies into
# $EVCXR_TMPDIR. Each further worker then gets a copy of that directory (its own crate, the
# compiled dependencies reused) and the workers take the remaining notebooks in turn.
JOBS="${NOTEBOOK_JOBS:-$(nproc 2>/dev/null || echo 1)}"
[[ "$JOBS" =~ ^[1-9][0-9]*$ ]] || die "NOTEBOOK_JOBS must be a positive integer, not '$JOBS'"
REST=$(( ${#NOTEBOOKS[@]} - 1 ))
[ "$JOBS" -le "$REST" ] || JOBS=$(( REST > 0 ? REST : 1 ))
RESULTS="$OUT_DIR/.results"
: >"$RESULTS"
if run_notebook "${NOTEBOOKS[0]}"; then echo pass >>"$RESULTS"; else echo fail >>"$RESULTS"; fi

QUEUE="$OUT_DIR/.queue"
echo 1 >"$QUEUE"
# Prints the index of the next notebook no worker has taken.
take_next() {
    (
        flock 8
        local i
        read -r i <"$QUEUE"
        echo $((i + 1)) >"$QUEUE"
        echo "$i"
    ) 8>"$QUEUE.lock"
}
worker() {
    local i
    while i=$(take_next) && [ "$i" -lt "${#NOTEBOOKS[@]}" ]; do
        if run_notebook "${NOTEBOOKS[$i]}"; then
            echo pass >>"$RESULTS"
        else
            echo fail >>"$RESULTS"
        fi
    done
}
if [ "$REST" -gt 0 ]; then
    for w in $(seq 2 "$JOBS"); do
        rm -rf "$EVCXR_TMPDIR.$w"
        cp -a "$EVCXR_TMPDIR" "$EVCXR_TMPDIR.$w" || die "could not copy $EVCXR_TMPDIR for worker $w"
        (EVCXR_TMPDIR="$EVCXR_TMPDIR.$w" worker) &
    done
    worker
    wait
fi

passed=$(grep -c '^pass$' "$RESULTS" || true)
failed=$(grep -c '^fail$' "$RESULTS" || true)
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
