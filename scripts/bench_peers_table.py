#!/usr/bin/env python3
"""The table of scripts/bench-peers.sh (chapter 10) from the JSON files of its pairs.

Run:  python3 scripts/bench_peers_table.py OUT     (standard library only)
Reads OUT/machine.txt and OUT/{row}-t{threads}-r{pair}-{ours-128,ours-512,llama}.json
(+ -load.txt); prints Markdown: the machine, the commands, and per row, threads and
figure: ours (median over the pairs), llama.cpp (median, best), the median of the
per-pair ratios ours / llama.cpp and their spread (min – max), ours (median) over
llama.cpp's best run (the issue's target), and the load averages.
"""

import glob
import json
import os
import re
import statistics
import sys

out = sys.argv[1]
BASE_ROWS = ["bf16", "q8_0", "q4_k_m", "48-layer-q4_k_m"]
# Each row on the CPU's best paths, then forced to AVX2 on both sides (bench-peers.sh AVX2=1).
ROW_ORDER = [r + sfx for sfx in ["", "-round", "-avx2"] for r in BASE_ROWS]


def load(path):
    """A figure's JSON, or None while it is missing or still being written (empty)."""
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        return None
    return json.load(open(path))


runs = {}  # (row, threads) -> list of pair dicts
for path in glob.glob(os.path.join(out, "*-load.txt")):
    m = re.match(r"(.+)-t(\d+)-r(\d+)-load\.txt$", os.path.basename(path))
    if not m:
        continue
    row, t, rep = m.group(1), int(m.group(2)), int(m.group(3))
    tag = path[: -len("-load.txt")]
    loads = [l.split("load average:")[1].strip() for l in open(path) if "load average:" in l]
    pair = {
        "rep": rep,
        "ours128": load(tag + "-ours-128.json"),
        "ours512": load(tag + "-ours-512.json"),
        "llama": load(tag + "-llama.json"),
        "load": loads,
    }
    if pair["ours512"] and pair["llama"]:
        runs.setdefault((row, t), []).append(pair)

machine = open(os.path.join(out, "machine.txt")).read() if os.path.exists(os.path.join(out, "machine.txt")) else ""
info, loads_seen = {}, {"start load": [], "end load": []}
for line in machine.splitlines():
    if ": " in line:
        key, value = line.split(": ", 1)
        info.setdefault(key, value)
        if key in loads_seen:
            loads_seen[key].append(value.split("load average:")[-1].strip())
print(f"Run of `scripts/bench-peers.sh`, {info.get('date', '?')}, on {info.get('cpu', '?')}; "
      f"SIMD flags present: {info.get('flags', '?').strip() or 'none of the listed'} "
      "(of avx2, avx512f, avx512_vnni, avx512_bf16, avx_vnni, amx_*).")
print()
print(f"- load average (1, 5, 15 min) at the start of each piece of the run: {'; '.join(loads_seen['start load']) or '?'}; "
      f"at the end: {'; '.join(loads_seen['end load']) or '?'}")
first = next((p for ps in runs.values() for p in ps if p["ours512"]), None)
if first:
    mach = first["ours512"]["machine"]
    print(f"- this machine's probes (first pair, {mach['threads']} threads): read "
          f"{mach['mem_read_gb_s']:.1f} GB/s, f32 FMA {mach['fma_gflop_s']:.0f} GFLOP/s ({mach['fma_kernel']})")
for label, pick in [("llama.cpp", lambda row: not row.endswith("-avx2")),
                    ("llama.cpp for the -avx2 rows", lambda row: row.endswith("-avx2"))]:
    llama_any = next((p["llama"] for (row, _), ps in runs.items() if pick(row) for p in ps), None)
    if llama_any:
        print(f"- {label}: llama-cpp-python {llama_any['llama_cpp_python']}, "
              f"`{llama_any['system_info'].strip()}`")
if any(row.endswith("-avx2") for row, _ in runs):
    print("- the -avx2 rows: ours with `ANATOMY_NO_AVX512=1` (AVX2 kernels only), llama.cpp built "
          "with `GGML_NATIVE=OFF` and AVX-512 off (`scripts/setup-peers.sh` with `LLAMA_AVX2=1`)")
if any(row.endswith("-round") for row, _ in runs):
    print("- the -round rows: ours with `ANATOMY_BF16_ACTIVATIONS=round` (activations rounded to "
          "bf16, as llama.cpp's bf16 path does; the default widens the bf16 weights to f32)")
print("- ours: `anatomy bench FILE --prompt-len 128 --gen 32 --reps 1 --threads T --json`, then "
      "`--prompt-len 512 --gen 1` (48-layer: `--prompt-len 512 --gen 16` only)")
print("- llama.cpp: `scripts/bench_llamacpp.py FILE --prefill 128,512 --decode-prompt 128 --gen 32 "
      "--reps 1 --threads T` (48-layer: `--prefill 512 --decode-prompt 512 --gen 16`)")
print("- each pair: ours, then llama.cpp, on the same file; the pairs interleave. Ratio = ours / llama.cpp "
      "within a pair; median and spread (min – max) over the pairs.")
print()
print("| file | threads | figure | pairs | ours (median) | llama.cpp (median / best) | ours / llama.cpp (median) | spread | ours / llama.cpp's best | load avg (1 min) |")
print("|---|---:|---|---:|---:|---:|---:|---:|---:|---|")


def rows_of(row):
    if row.startswith("48-layer"):
        return [
            ("prefill 512 (tok/s)", lambda p: p["ours512"]["prefill_tok_s"], lambda p: p["llama"]["prefill_tok_s"]["512"], True),
            ("decode 16 after 512 (tok/s)", lambda p: p["ours512"]["decode_tok_s"], lambda p: p["llama"]["decode_tok_s"], True),
            ("peak RSS (GB)", lambda p: p["ours512"]["peak_rss_bytes"] / 1e9, lambda p: p["llama"]["peak_rss_bytes"] / 1e9, False),
        ]
    return [
        ("prefill 128 (tok/s)", lambda p: p["ours128"]["prefill_tok_s"], lambda p: p["llama"]["prefill_tok_s"]["128"], True),
        ("prefill 512 (tok/s)", lambda p: p["ours512"]["prefill_tok_s"], lambda p: p["llama"]["prefill_tok_s"]["512"], True),
        ("decode 32 after 128 (tok/s)", lambda p: p["ours128"]["decode_tok_s"], lambda p: p["llama"]["decode_tok_s"], True),
        ("peak RSS (GB)", lambda p: max(p["ours128"]["peak_rss_bytes"], p["ours512"]["peak_rss_bytes"]) / 1e9,
         lambda p: p["llama"]["peak_rss_bytes"] / 1e9, False),
    ]


keys = sorted(runs, key=lambda k: (ROW_ORDER.index(k[0]) if k[0] in ROW_ORDER else 99, -k[1]))
for row, t in keys:
    pairs = sorted(runs[(row, t)], key=lambda p: p["rep"])
    if not row.startswith("48-layer"):
        pairs = [p for p in pairs if p["ours128"]]
    if not pairs:
        continue
    loads = ", ".join(p["load"][0].split(",")[0] for p in pairs if p["load"])
    for name, ours_f, peer_f, higher_better in rows_of(row):
        ours = [ours_f(p) for p in pairs]
        peer = [peer_f(p) for p in pairs]
        ratios = [o / q for o, q in zip(ours, peer)]
        best = max(peer) if higher_better else min(peer)
        print(f"| {row} | {t} | {name} | {len(pairs)} | {statistics.median(ours):.2f} | "
              f"{statistics.median(peer):.2f} / {best:.2f} | {statistics.median(ratios):.2f}× | "
              f"{min(ratios):.2f} – {max(ratios):.2f} | {statistics.median(ours) / best:.2f}× | {loads} |")

# Ours' decode against the read ceiling its own process measured (the issue's 80 % floor).
fractions = []
for row, t in keys:
    pairs = [p for p in sorted(runs[(row, t)], key=lambda p: p["rep"])
             if (p["ours512"] if row.startswith("48-layer") else p["ours128"])]
    reports = [p["ours512"] if row.startswith("48-layer") else p["ours128"] for p in pairs]
    if reports:
        fractions.append((row, t, reports))
if fractions:
    print()
    print("Ours' decode against the read ceiling measured in the same process "
          "(`decode_read_gb_s` / `mem_bandwidth_gb_s` of each report):")
    print()
    print("| file | threads | runs | decode read GB/s (median) | read ceiling GB/s (median) | fraction (median) | spread |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for row, t, reports in fractions:
        frac = [r["decode_roofline_fraction"] for r in reports]
        print(f"| {row} | {t} | {len(reports)} | {statistics.median(r['decode_read_gb_s'] for r in reports):.1f} | "
              f"{statistics.median(r['mem_bandwidth_gb_s'] for r in reports):.1f} | "
              f"{100 * statistics.median(frac):.0f} % | {100 * min(frac):.0f} – {100 * max(frac):.0f} % |")

# Two threads over one, for each side (medians over the pairs), where both were measured.
scaling = []
for row in sorted({r for r, _ in keys}, key=lambda r: ROW_ORDER.index(r) if r in ROW_ORDER else 99):
    if (row, 1) not in runs or (row, 2) not in runs:
        continue
    for name, ours_f, peer_f, higher_better in rows_of(row):
        if not higher_better:
            continue
        med = lambda t, f: statistics.median(f(p) for p in runs[(row, t)] if p["ours128"] or row.startswith("48-layer"))
        scaling.append((row, name, med(2, ours_f) / med(1, ours_f), med(2, peer_f) / med(1, peer_f)))
if scaling:
    print()
    print("Two threads over one (median at 2 threads / median at 1):")
    print()
    print("| file | figure | ours | llama.cpp |")
    print("|---|---|---:|---:|")
    for row, name, ours, peer in scaling:
        print(f"| {row} | {name} | {ours:.2f}× | {peer:.2f}× |")
