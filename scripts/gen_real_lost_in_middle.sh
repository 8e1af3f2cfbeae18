#!/usr/bin/env bash
# Writes data/real/lost-in-middle-smollm2.json: S1 exercise 2 ("lost in the middle") on
# SmolLM2-135M-Instruct through our engine, the key sentence at the start, the middle and the
# end of a filler document, greedy answers in the file's own chat template. The claim
# real.lost_in_middle is judged from this file.
#
#   bash scripts/gen_real_lost_in_middle.sh
#
# Documents of WORDS filler words (prompts of about 1,750 tokens, a fifth of the model's
# trained 8,192) and TRIALS vaults per placement keep the run to minutes on two cores; the
# exercise's 10,000-token documents would take hours of prefill here.
set -euo pipefail
cd "$(dirname "$0")/.."
model=target/real-models/smollm2-135m-instruct-q4_1.gguf
out=data/real/lost-in-middle-smollm2.json
WORDS=1500
TRIALS=6
[ -f "$model" ] || {
    echo "gen_real_lost_in_middle: $model is absent (bash scripts/get-real-models.sh fetches it)" >&2
    exit 2
}
cargo build --release --quiet
target/release/anatomy lost-in-middle "$model" --words "$WORDS" --trials "$TRIALS" --json > "$out.tmp"
mv "$out.tmp" "$out"
echo "wrote $out"
