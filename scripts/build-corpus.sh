#!/usr/bin/env bash
# The training corpus of chapter 12 (issue 16 item 4): English and Chinese plain text,
# rebuilt deterministically on a fresh machine from sources this project may use:
#   en: The Rust Programming Language and The Rust Reference, as rustup's `rust-docs`
#       component installs them (MIT OR Apache-2.0), HTML turned into plain text;
#   zh: Debian's `fortunes-zh` package (tang300: 300 Tang poems, song100: 100 Song ci,
#       chinese: a collection of sayings and quotations; GPL-3.0+), fortune separators and
#       terminal colour codes removed.
# Writes data/corpus/en/*.txt and data/corpus/zh/*.txt (one document per file; sorted
# names; the same inputs give byte-identical files). Licences and sizes: data/PROVENANCE.md.
#
# Usage: scripts/build-corpus.sh [OUT_DIR]          (default data/corpus)
# Needs: rustup with the rust-docs component (`rustup component add rust-docs`), python3
# (standard library only), and fortunes-zh (`apt-get install -y fortunes-zh`).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$root/data/corpus}"

docs_index="$(rustup doc --path)"            # …/share/doc/rust/html/index.html
docs="$(dirname "$docs_index")"
fortunes=/usr/share/games/fortunes
for need in "$docs/book/ch01-01-installation.html" "$docs/reference/introduction.html"; do
    [[ -f "$need" ]] || { echo "build-corpus: $need missing: rustup component add rust-docs" >&2; exit 2; }
done
for f in tang300 song100 chinese; do
    [[ -f "$fortunes/$f" ]] || { echo "build-corpus: $fortunes/$f missing: apt-get install -y fortunes-zh" >&2; exit 2; }
done

rm -rf "$out"
mkdir -p "$out/en" "$out/zh"

python3 - "$docs" "$fortunes" "$out" <<'PY'
import hashlib
import re
import sys
from html.parser import HTMLParser
from pathlib import Path

docs, fortunes, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])

BLOCK = {"p", "div", "pre", "li", "ul", "ol", "table", "tr", "h1", "h2", "h3", "h4", "h5",
         "h6", "blockquote", "dt", "dd", "dl", "br", "hr", "section", "figure", "figcaption",
         "details", "summary"}
SKIP = {"script", "style", "nav", "noscript", "svg", "button", "template", "head"}


class MainText(HTMLParser):
    """The text inside mdBook's <main>, markup removed: block elements become line
    breaks, <pre> keeps its whitespace, table cells are separated by a tab."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.depth_main = 0
        self.skip = 0
        self.pre = 0
        self.spans = []  # per open <span>: does it hide its text (mdBook's "boring" lines)
        self.parts = []

    def handle_starttag(self, tag, attrs):
        if tag == "main":
            self.depth_main += 1
        if not self.depth_main:
            return
        if tag == "span":
            # Lines of an example that mdBook hides (`# fn main() {` in the source).
            hidden = "boring" in (dict(attrs).get("class") or "").split()
            self.spans.append(hidden)
            self.skip += hidden
        elif tag in SKIP:
            self.skip += 1
        elif tag == "pre":
            self.pre += 1
            self.parts.append("\n\n")
        elif tag in ("td", "th"):
            self.parts.append("\t")
        elif tag in BLOCK:
            self.parts.append("\n\n" if tag not in ("li", "br", "tr", "dt", "dd") else "\n")

    def handle_endtag(self, tag):
        if tag == "main":
            self.depth_main -= 1
            return
        if not self.depth_main:
            return
        if tag == "span":
            self.skip -= self.spans.pop() if self.spans else 0
        elif tag in SKIP:
            self.skip -= 1
        elif tag == "pre":
            self.pre -= 1
            self.parts.append("\n\n")
        elif tag in BLOCK:
            self.parts.append("\n")

    def handle_data(self, data):
        if not self.depth_main or self.skip:
            return
        self.parts.append(data if self.pre else re.sub(r"\s+", " ", data))

    def text(self):
        raw = "".join(self.parts)
        lines = [line.rstrip() for line in raw.split("\n")]
        # Outside code, a line's leading blanks come from the source's indentation only.
        text = "\n".join(lines)
        text = re.sub(r"\n{3,}", "\n\n", text)
        return text.strip() + "\n"


def html_text(path):
    p = MainText()
    p.feed(path.read_text(encoding="utf-8"))
    p.close()
    return p.text()


def book_pages():
    # The current edition's pages: chapters and appendices at the top level (the rest of
    # the top level is first-edition "this page moved" stubs, print.html and the like).
    pat = re.compile(r"^(ch\d\d-\d\d-.*|appendix-\d\d.*|foreword|title-page)\.html$")
    return sorted(p for p in (docs / "book").iterdir() if pat.match(p.name))


def reference_pages():
    skip = {"print.html", "toc.html", "404.html", "test-summary.html"}
    return sorted(p for p in (docs / "reference").rglob("*.html") if p.name not in skip)


written, seen = 0, set()
for source, pages in [("book", book_pages()), ("reference", reference_pages())]:
    for page in pages:
        text = html_text(page)
        digest = hashlib.sha256(text.encode()).digest()
        if len(text) < 400 or digest in seen:  # redirect stubs and duplicate pages
            continue
        seen.add(digest)
        rel = page.relative_to(docs / source).with_suffix("")
        name = f"{source}-" + "-".join(rel.parts) + ".txt"
        (out / "en" / name).write_text(text, encoding="utf-8")
        written += 1
print(f"en: {written} documents")

ANSI = re.compile(r"\x1b\[[0-9;]*m")
PER_FILE = 50  # fortunes per document file: a poem is short, a file is a unit of the split
for name in ["chinese", "song100", "tang300"]:
    raw = (fortunes / name).read_text(encoding="utf-8")
    # Colour codes, some of them broken in two by another (`\x1b[;\x1b[34;1mm`): removed
    # until none is left.
    while ANSI.search(raw):
        raw = ANSI.sub("", raw)
    raw = raw.replace("\x1b", "")
    entries = [e.strip("\n") for e in re.split(r"(?m)^%[ \t]*(?:\n|\Z)", raw)]
    entries = [re.sub(r"[ \t]+$", "", e, flags=re.M) for e in entries if e.strip()]
    for i in range(0, len(entries), PER_FILE):
        chunk = "\n\n".join(entries[i : i + PER_FILE]) + "\n"
        (out / "zh" / f"{name}-{i // PER_FILE:03d}.txt").write_text(chunk, encoding="utf-8")
    print(f"zh: {name}: {len(entries)} fortunes in {-(-len(entries) // PER_FILE)} files")
PY

for lang in en zh; do
    printf '%s: %s files, %s bytes\n' "$lang" "$(ls "$out/$lang" | wc -l)" \
        "$(cat "$out/$lang"/*.txt | wc -c)"
done
