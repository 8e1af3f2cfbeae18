#!/usr/bin/env python3
"""llama.cpp (through llama-cpp-python) on a GGUF conversion of a bench checkpoint: prefill
and greedy decode rates, the peer of `anatomy bench` (chapter 10). Batch 1, CPU threads.

Run:  /work/llamavenv/bin/python scripts/bench_llamacpp.py MODEL.gguf
          [--prefill 128,512] [--decode-prompt 128] [--gen 32] [--threads 2] [--reps 3]
Uses: llama-cpp-python (built from its sdist, see scripts/bench-peers.sh), numpy.
Prompts are random token ids (numpy seed 0), the same lengths as ours. Each figure is the
median of --reps repetitions after one warm-up. Prints one JSON object: rates, every
repetition, versions, peak RSS.
"""

import argparse
import ctypes
import json
import resource
import statistics
import time

import numpy as np
import llama_cpp
from llama_cpp import Llama


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gguf")
    ap.add_argument("--prefill", default="128,512")
    ap.add_argument("--decode-prompt", type=int, default=128)
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    llm = Llama(
        model_path=args.gguf,
        n_threads=args.threads,
        n_threads_batch=args.threads,
        n_ctx=1024,
        n_batch=512,
        verbose=False,
    )
    vocab = llm.n_vocab()
    rng = np.random.default_rng(0)

    def ids(n):
        return [int(t) for t in rng.integers(0, vocab, n)]

    def last_logits():
        p = llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1)
        return np.ctypeslib.as_array(ctypes.cast(p, ctypes.POINTER(ctypes.c_float)), shape=(vocab,))

    out = {
        "peer": "llama.cpp",
        "gguf": args.gguf,
        "threads": args.threads,
        "llama_cpp_python": llama_cpp.__version__,
        "system_info": llama_cpp.llama_print_system_info().decode(),
        "reps": args.reps,
        "prefill_tok_s": {},
        "prefill_runs": {},
    }
    # Warm-up: one short prompt touches every layer.
    llm.reset()
    llm.eval(ids(8))
    for n in [int(s) for s in args.prefill.split(",")]:
        runs = []
        for _ in range(args.reps):
            prompt = ids(n)
            llm.reset()
            t = time.perf_counter()
            llm.eval(prompt)
            runs.append(n / (time.perf_counter() - t))
        out["prefill_runs"][str(n)] = runs
        out["prefill_tok_s"][str(n)] = statistics.median(runs)
    runs = []
    for _ in range(args.reps):
        llm.reset()
        llm.eval(ids(args.decode_prompt))
        nxt = int(np.argmax(last_logits()))
        t = time.perf_counter()
        for _ in range(args.gen):
            llm.eval([nxt])
            nxt = int(np.argmax(last_logits()))
        runs.append(args.gen / (time.perf_counter() - t))
    out["decode_runs"] = runs
    out["decode_tok_s"] = statistics.median(runs)
    out["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps(out))


if __name__ == "__main__":
    main()
