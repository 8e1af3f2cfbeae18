#!/usr/bin/env bash
# Regenerates the claims table in book/src/appendix-claims.md: replaces everything between
# the lines `<!-- claims:begin -->` and `<!-- claims:end -->` with the output of
# `anatomy tour --markdown --skip-figures`. tests/book.rs fails until this has been run
# after a claim changes.
set -euo pipefail
cd "$(dirname "$0")/.."
file=book/src/appendix-claims.md
table="$(mktemp)"
trap 'rm -f "$table" "$table.new"' EXIT

cargo run --release -q -- tour --markdown --skip-figures > "$table"
grep -qx '<!-- claims:begin -->' "$file" && grep -qx '<!-- claims:end -->' "$file" || {
  echo "update-book-claims: markers missing in $file" >&2
  exit 1
}
awk -v table="$table" '
  $0 == "<!-- claims:end -->" { skipping = 0 }
  !skipping { print }
  $0 == "<!-- claims:begin -->" {
    while ((getline line < table) > 0) print line
    skipping = 1
  }
' "$file" > "$table.new"
mv "$table.new" "$file"
echo "updated $file ($(grep -c '^| `' "$file") claims)"
