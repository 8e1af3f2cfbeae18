#!/usr/bin/env bash
# Copies KaTeX's stylesheet and fonts into book/src/katex/ so the book's maths renders
# without network access. mdbook-katex 0.10.0 pre-renders with KaTeX 0.16.4 (the version
# bundled in its `katex` crate 0.4.6), so the stylesheet must be the same version.
# Only the woff2 fonts are shipped (every current browser reads woff2); the stylesheet's
# woff/ttf fallbacks are removed so it names no file that is not there.
# Needs npm (the npm registry). Run from anywhere: bash scripts/vendor-katex.sh
set -euo pipefail
VERSION=0.16.4
root="$(cd "$(dirname "$0")/.." && pwd)"
dest="$root/book/src/katex"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

(cd "$tmp" && npm pack --silent "katex@$VERSION" >/dev/null && tar xzf "katex-$VERSION.tgz")
rm -rf "$dest"
mkdir -p "$dest/fonts"
cp "$tmp/package/dist/fonts/"*.woff2 "$dest/fonts/"
cp "$tmp/package/LICENSE" "$dest/LICENSE"
sed -E 's/,url\(fonts\/[A-Za-z0-9_-]+\.(woff|ttf)\) format\("(woff|truetype)"\)//g' \
  "$tmp/package/dist/katex.min.css" > "$dest/katex.min.css"
if grep -qE '\.(woff|ttf)\)' "$dest/katex.min.css"; then
  echo "vendor-katex: woff/ttf references remain in katex.min.css" >&2
  exit 1
fi
echo "KaTeX $VERSION: $(ls "$dest/fonts" | wc -l) fonts, $(du -sh "$dest" | cut -f1) in $dest"
