#!/usr/bin/env python3
"""Writes the book's CJK subset font: exactly the CJK characters of book/src, cut out of
Noto Sans CJK SC (SIL Open Font License 1.1), so that the Chinese section titles render on a
machine without CJK fonts.

    python3 scripts/gen_cjk_font.py [--source-dir DIR]

Source: Debian's package fonts-noto-cjk (version 1:20220127+repack1-1, Noto Sans CJK 2.004),
face "Noto Sans CJK SC" of NotoSansCJK-Regular.ttc and NotoSansCJK-Bold.ttc. Without
--source-dir the script fetches the package with `apt-get download fonts-noto-cjk` into
target/cjk-font/ and unpacks it there (`dpkg-deb -x`) without installing it, so the machine
keeps no system CJK font. Needs fontTools (`pip install fonttools==4.68.0`).

Writes book/src/fonts/anatomy-cjk-{regular,bold}.otf (OpenType/CFF, no hinting, the
characters' glyphs and the layout features they use) and prints the character count.
tests/book.rs reads the fonts' cmap and fails when book/src holds a CJK character the font
lacks: rerun this script after adding Chinese text to the book. The subset is a Modified
Version under the OFL, so it carries its own family name ("Anatomy CJK Subset"); the
licence and provenance are in book/src/fonts/ (mdBook copies the folder into the built book;
book/theme/cjk.css loads the fonts from there).
"""

import argparse
import pathlib
import subprocess
import sys

from fontTools import subset
from fontTools.ttLib import TTCollection

REPO = pathlib.Path(__file__).resolve().parent.parent
OUT = REPO / "book" / "src" / "fonts"
FACE = "Noto Sans CJK SC"
FAMILY = "Anatomy CJK Subset"
# The same ranges as `is_cjk` in tests/book.rs.
RANGES = [
    (0x1100, 0x11FF),  # Hangul Jamo
    (0x2E80, 0x2FDF),  # CJK radicals, Kangxi radicals
    (0x3000, 0x303F),  # CJK symbols and punctuation (、。「」)
    (0x3040, 0x30FF),  # Hiragana, Katakana
    (0x3100, 0x31FF),  # Bopomofo, Hangul compatibility jamo, …
    (0x3400, 0x4DBF),  # CJK extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xAC00, 0xD7AF),  # Hangul syllables
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0xFE30, 0xFE4F),  # CJK compatibility forms
    (0xFF00, 0xFFEF),  # half- and full-width forms (：，（）)
    (0x20000, 0x3FFFF),  # extensions B onwards
]


def is_cjk(ch):
    return any(lo <= ord(ch) <= hi for lo, hi in RANGES)


def book_characters():
    chars = set()
    for path in sorted((REPO / "book" / "src").rglob("*.md")):
        chars |= {c for c in path.read_text(encoding="utf-8") if is_cjk(c)}
    return sorted(chars)


def source_dir(given):
    if given:
        return pathlib.Path(given)
    work = REPO / "target" / "cjk-font"
    unpacked = work / "x"
    if not (unpacked / "usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc").exists():
        work.mkdir(parents=True, exist_ok=True)
        subprocess.run(["apt-get", "download", "fonts-noto-cjk"], cwd=work, check=True)
        deb = sorted(work.glob("fonts-noto-cjk_*.deb"))[-1]
        subprocess.run(["dpkg-deb", "-x", str(deb), str(unpacked)], check=True)
    return unpacked / "usr/share/fonts/opentype/noto"


def face_index(ttc_path):
    for i, font in enumerate(TTCollection(str(ttc_path)).fonts):
        if font["name"].getDebugName(1) == FACE:
            return i
    sys.exit(f"{ttc_path}: no face named {FACE!r}")


def rename(font, style):
    """Gives the subset its own names (OFL: a Modified Version)."""
    name = font["name"]
    full = f"{FAMILY} {style}"
    postscript = f"{FAMILY.replace(' ', '')}-{style}"
    for record in list(name.names):
        if record.nameID in (1, 3, 4, 6, 16, 17, 21, 22):
            name.removeNames(nameID=record.nameID)
    for name_id, value in [(1, FAMILY), (2, style), (3, f"{postscript};subset"), (4, full),
                           (6, postscript)]:
        name.setName(value, name_id, 3, 1, 0x409)
        name.setName(value, name_id, 1, 0, 0)
    if "CFF " in font:
        cff = font["CFF "].cff
        cff.fontNames = [postscript]
        top = cff.topDictIndex[0]
        top.FamilyName, top.FullName = FAMILY, full


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source-dir", help="directory holding NotoSansCJK-{Regular,Bold}.ttc")
    args = parser.parse_args()
    src = source_dir(args.source_dir)
    chars = book_characters()
    OUT.mkdir(parents=True, exist_ok=True)
    for style in ["Regular", "Bold"]:
        ttc = src / f"NotoSansCJK-{style}.ttc"
        options = subset.Options()
        options.font_number = face_index(ttc)
        options.hinting = False
        options.desubroutinize = True
        options.name_IDs = ["*"]
        options.name_languages = ["*"]
        options.notdef_outline = True
        font = subset.load_font(str(ttc), options)
        subsetter = subset.Subsetter(options)
        subsetter.populate(unicodes=[ord(c) for c in chars])
        subsetter.subset(font)
        rename(font, style)
        out = OUT / f"anatomy-cjk-{style.lower()}.otf"
        font.save(str(out))
        print(f"{out.relative_to(REPO)}: {len(chars)} characters, {out.stat().st_size} bytes")


if __name__ == "__main__":
    main()
