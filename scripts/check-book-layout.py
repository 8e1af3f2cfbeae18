#!/usr/bin/env python3
"""Renders the built book (book/book, from `mdbook build book`) in headless Chromium at a
given window width and reports what overflows the text column: tables, code blocks,
figures and KaTeX lines wider than their container, and SVG text smaller than a floor.

    python3 scripts/check-book-layout.py [--width 1280] [--min-font-px 10] [PAGE.html ...]

Each page is copied beside itself with a script that measures the laid-out page and writes
its findings into the DOM; `chromium --headless --dump-dom` prints that DOM. Exits 1 when a
page has a finding, 2 when Chromium is missing. Needs Debian's `chromium`.
"""

import argparse
import html
import json
import pathlib
import re
import shutil
import subprocess
import sys

PROBE = """
<script>
window.addEventListener('load', () => {
  const found = [];
  const main = document.querySelector('main') || document.body;
  const right = main.getBoundingClientRect().right + 2;
  const name = (el) => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') +
      ' "' + (el.textContent || '').trim().slice(0, 40).replace(/\\s+/g, ' ') + '"';
  for (const el of main.querySelectorAll('table, pre, .katex-display, img, svg, .claims-table')) {
    if (el.closest('.katex') && el.tagName.toLowerCase() === 'svg') continue;
    const box = el.getBoundingClientRect();
    const scroller = el.closest('pre, .table-wrapper') || el;
    const overflows = scroller.scrollWidth > scroller.clientWidth + 1;
    if (box.right > right || (overflows && el.tagName.toLowerCase() === 'table')) {
      found.push('overflow: ' + name(el) + ' right ' + Math.round(box.right) + ' > ' + Math.round(right));
    }
  }
  // Text inside inline figures, at the size it is drawn on screen.
  for (const svg of main.querySelectorAll('svg')) {
    if (svg.closest('.katex')) continue;
    const scale = svg.getBoundingClientRect().width / (svg.viewBox && svg.viewBox.baseVal && svg.viewBox.baseVal.width || svg.getBoundingClientRect().width || 1);
    for (const t of svg.querySelectorAll('text')) {
      const size = parseFloat(t.getAttribute('font-size') || getComputedStyle(t).fontSize) * scale;
      if (t.textContent.trim() && size < MIN_FONT) {
        found.push('small text: ' + JSON.stringify(t.textContent.trim().slice(0, 30)) + ' at ' + size.toFixed(1) + ' px');
        break;
      }
    }
  }
  const out = document.createElement('pre');
  out.id = 'layout-findings';
  out.textContent = 'LAY' + 'OUT<<' + JSON.stringify(found) + '>>LAY' + 'OUT';
  document.body.appendChild(out);
});
</script>
"""


def check(page: pathlib.Path, width: int, min_font: float, chromium: str) -> list:
    probe = page.with_name(page.stem + ".layout-probe.html")
    text = page.read_text(encoding="utf-8")
    probe.write_text(text.replace("</body>", PROBE.replace("MIN_FONT", str(min_font)) + "</body>"), encoding="utf-8")
    try:
        dom = subprocess.run(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             f"--window-size={width},1000", "--virtual-time-budget=5000", "--dump-dom",
             probe.as_uri()],
            capture_output=True, text=True, timeout=120, check=False,
        ).stdout
    finally:
        probe.unlink(missing_ok=True)
    m = re.search(r"LAYOUT&lt;&lt;(.*?)&gt;&gt;LAYOUT", dom, re.S)
    if not m:
        return ["no findings block: the page did not load"]
    return json.loads(html.unescape(m.group(1)))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--width", type=int, default=1280)
    ap.add_argument("--min-font-px", type=float, default=10.0)
    ap.add_argument("pages", nargs="*")
    a = ap.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        print("check-book-layout: chromium is not installed", file=sys.stderr)
        return 2
    root = pathlib.Path(__file__).resolve().parent.parent / "book" / "book"
    pages = [pathlib.Path(p) for p in a.pages] or sorted(
        p for p in root.rglob("*.html")
        if p.name not in ("print.html", "toc.html", "404.html") and ".layout-probe" not in p.name
    )
    bad = 0
    for page in pages:
        findings = check(page.resolve(), a.width, a.min_font_px, chromium)
        rel = page.resolve().relative_to(root) if root in page.resolve().parents else page
        print(f"{rel}: {'ok' if not findings else str(len(findings)) + ' finding(s)'}")
        for f in findings:
            print(f"    {f}")
        bad += bool(findings)
    print(f"{len(pages)} pages at {a.width} px, {bad} with findings")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
