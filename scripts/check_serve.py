#!/usr/bin/env python3
"""`anatomy serve` end to end, as its users meet it.

Starts the server on free loopback ports (the bundled MoE, and SmolLM2 when
target/real-models has it) and checks it with the official `openai` client: chat, stream =
non-stream, logprobs and top_logprobs, completions, 16 concurrent clients with identical
greedy answers, a dropped stream followed by a normal request, the thinking budget with
reasoning_content. Requests the client cannot send (malformed JSON, a 2 MiB body) go over a
raw socket. Then the chat page in headless Chromium, driven over the DevTools protocol on a
pipe (stdlib only): a message from the query string, the answer text and one heatmap row per
token. Then a bounded load run (200 requests, 16 at a time) printing p50/p99 latency and
tokens/s. Any failed check exits 1.

Usage: check_serve.py --anatomy BIN [--chromium BIN] [--screenshots DIR] [--requests N]
"""

import argparse
import base64
import concurrent.futures as futures
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import openai

ROOT = Path(__file__).resolve().parent.parent
MOE = "data/anatomy-moe"
SMOLLM2 = ROOT / "target/real-models/smollm2-135m-instruct-q4_1.gguf"
PROMPT = "Hello"
FAILURES = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        FAILURES.append(what)


class Server:
    """`anatomy serve MODEL --port 0`, its port read from the first line it prints."""

    def __init__(self, anatomy, model):
        self.model = model
        self.proc = subprocess.Popen(
            [anatomy, "serve", str(model), "--port", "0"],
            cwd=ROOT, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if "listening on http://" not in line:
            raise SystemExit(f"anatomy serve {model} did not start: {line!r}")
        self.port = int(line.strip().rstrip("/").rsplit(":", 1)[1])
        self.id = Path(model).name
        self.client = openai.OpenAI(base_url=f"http://127.0.0.1:{self.port}/v1",
                                    api_key="unused", max_retries=0, timeout=120)

    def close(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)

    def raw(self, body, path="/v1/chat/completions"):
        """POSTs bytes over a plain socket; returns (status, parsed JSON body). The body is
        written from a thread, so a server that answers before reading all of it (413)
        cannot make the write fail first."""
        s = socket.create_connection(("127.0.0.1", self.port), timeout=30)
        head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
        s.sendall(head)
        writer = threading.Thread(target=lambda: _send_quietly(s, body))
        writer.start()
        data = b""
        while chunk := s.recv(65536):
            data += chunk
        writer.join()
        s.close()
        head, _, rest = data.partition(b"\r\n\r\n")
        status = int(head.split()[1])
        return status, json.loads(rest) if rest.startswith(b"{") else rest

    def generate(self, *args):
        out = subprocess.run(["target/release/anatomy", "generate", str(self.model), *args,
                              "--json"], cwd=ROOT, capture_output=True, text=True, check=True)
        return json.loads(out.stdout)

    def detokenize(self, ids):
        out = subprocess.run(["target/release/anatomy", "detokenize", ",".join(map(str, ids)),
                              "--vocab", str(self.model), "--json"], cwd=ROOT,
                             capture_output=True, text=True, check=True)
        return json.loads(out.stdout)["text"]


def _send_quietly(sock, body):
    try:
        sock.sendall(body)
    except OSError:
        pass


def chat(server, **extra):
    args = dict(model=server.id, messages=[{"role": "user", "content": PROMPT}], max_tokens=16)
    args.update(extra)
    return server.client.chat.completions.create(**args)


def streamed(server, **extra):
    text, reasoning, last = "", "", None
    for chunk in chat(server, stream=True, **extra):
        if chunk.choices:
            delta = chunk.choices[0].delta
            text += delta.content or ""
            reasoning += (delta.model_extra or {}).get("reasoning_content") or ""
            last = chunk
    return text, reasoning, last


def check_client(server):
    """The endpoints through the official client, against `anatomy generate`."""
    models = server.client.models.list()
    check([m.id for m in models.data] == [server.id], f"{server.id}: /v1/models lists it")
    want = server.generate("--chat", "--prompt", PROMPT, "--max-new-tokens", "16")
    whole = chat(server)
    text = whole.choices[0].message.content
    reasoning = (whole.choices[0].message.model_extra or {}).get("reasoning_content") or ""
    want_text = want["text"]
    if whole.choices[0].finish_reason == "stop" and want["ids"]:
        # The API leaves the end-of-turn token out of the message; `generate` prints it.
        want_text = server.detokenize(want["ids"][:-1])
    check(reasoning + text == want_text, f"{server.id}: greedy chat = generate --chat")
    check(whole.usage.completion_tokens == len(want["ids"]), f"{server.id}: usage counts")
    s_text, s_reasoning, last = streamed(server)
    check((s_reasoning, s_text) == (reasoning, text), f"{server.id}: stream = non-stream")
    check(last.choices[0].finish_reason == whole.choices[0].finish_reason,
          f"{server.id}: stream's finish_reason")
    lp = chat(server, logprobs=True, top_logprobs=3).choices[0].logprobs.content
    check(len(lp) == whole.usage.completion_tokens and all(len(t.top_logprobs) == 3 for t in lp),
          f"{server.id}: one logprob entry per token, 3 alternatives each")
    check(all(t.logprob == t.top_logprobs[0].logprob for t in lp),
          f"{server.id}: greedy picks the most likely alternative")
    want = server.generate("--prompt", PROMPT, "--max-new-tokens", "8")
    comp = server.client.completions.create(model=server.id, prompt=PROMPT, max_tokens=8)
    check(comp.choices[0].text == want["text"], f"{server.id}: completions = generate")


def check_concurrency(server):
    want = chat(server).choices[0].message.content
    with futures.ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda _: chat(server).choices[0].message.content, range(16)))
    check(all(a == want for a in answers), "16 concurrent clients get the same greedy answer")
    stream = chat(server, stream=True, max_tokens=400)
    for i, _ in enumerate(stream):
        if i == 3:
            break
    stream.close()
    start = time.monotonic()
    after = chat(server).choices[0].message.content
    check(after == want, f"a normal request after a dropped stream ({time.monotonic() - start:.2f} s)")


def check_errors(server):
    status, body = server.raw(b'{"model": ')
    check(status == 400 and "error" in body, "malformed JSON -> 400")
    big = json.dumps({"model": server.id, "messages": [], "pad": "x" * (2 << 20)}).encode()
    status, body = server.raw(big)
    check(status == 413 and "error" in body, "2 MiB body -> 413")
    try:
        chat(server, max_tokens=10**12)
        check(False, "max_tokens 10**12 -> 4xx")
    except openai.BadRequestError as e:
        check(e.status_code == 400, "max_tokens 10**12 -> 400")
    try:
        chat(server, model="no-such-model")
        check(False, "unknown model -> 4xx")
    except openai.NotFoundError as e:
        check(e.status_code == 404 and e.body["code"] == "model_not_found", "unknown model -> 404")


def check_budget(server):
    """Chapter 8's budget over HTTP: a reply continued from `<think>` is cut after 3 tokens."""
    messages = [{"role": "user", "content": PROMPT}, {"role": "assistant", "content": "<think>\n"}]
    extra = {"continue_final_message": True, "thinking_budget": 3}
    whole = chat(server, messages=messages, max_tokens=40, extra_body=extra)
    message = whole.choices[0].message
    reasoning = (message.model_extra or {}).get("reasoning_content") or ""
    check((whole.model_extra or {}).get("budget_cut") is True, "thinking_budget: budget_cut")
    check("Considering the limited time" in reasoning and "</think>" not in message.content,
          "thinking_budget: reasoning_content holds the early stop, content the answer")
    s_text, s_reasoning, _ = streamed(server, messages=messages, max_tokens=40, extra_body=extra)
    check((s_reasoning, s_text) == (reasoning, message.content),
          "thinking_budget: streamed split = whole split")


class Chromium:
    """Headless Chromium driven over the DevTools protocol on a pipe (fds 3 and 4,
    messages ended by NUL), so no websocket library is needed."""

    def __init__(self, binary, width, height):
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()

        def fds():
            os.dup2(to_child_r, 3)
            os.dup2(from_child_w, 4)

        self.profile = tempfile.TemporaryDirectory()
        self.proc = subprocess.Popen(
            [binary, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
             f"--user-data-dir={self.profile.name}", f"--window-size={width},{height}",
             "about:blank"],
            # pass_fds keeps 3 and 4 through the close that follows preexec_fn.
            pass_fds=(3, 4), preexec_fn=fds,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_child_r)
        os.close(from_child_w)
        self.next_id, self.buffer, self.session = 0, b"", None
        self.size = (width, height)

    def call(self, method, **params):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params}
        if self.session and not method.startswith("Target."):
            msg["sessionId"] = self.session
        os.write(self._to_child, json.dumps(msg).encode() + b"\0")
        while True:
            while b"\0" not in self.buffer:
                chunk = os.read(self._from_child, 1 << 20)
                if not chunk:
                    raise RuntimeError("chromium closed the DevTools pipe")
                self.buffer += chunk
            raw, _, self.buffer = self.buffer.partition(b"\0")
            reply = json.loads(raw)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]

    def open(self, url):
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        width, height = self.size
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height,
                  deviceScaleFactor=1, mobile=width < 600)
        self.call("Page.navigate", url=url)

    def eval(self, expression):
        return self.call("Runtime.evaluate", expression=expression,
                         returnByValue=True)["result"].get("value")

    def screenshot(self, path):
        data = self.call("Page.captureScreenshot", format="png")["data"]
        Path(path).write_bytes(base64.b64decode(data))

    def close(self):
        try:
            self.call("Browser.close")
        except RuntimeError:
            pass
        self.proc.wait(timeout=10)
        self.profile.cleanup()


PAGE_STATE = """JSON.stringify({done: document.body.dataset.done || '',
  rows: document.querySelectorAll('#heatmap .row:not(.head)').length,
  answer: document.getElementById('answer').textContent,
  thinking: document.getElementById('thinking').textContent})"""


def run_page(binary, server, query, size, shot=None):
    browser = Chromium(binary, *size)
    try:
        browser.open(f"http://127.0.0.1:{server.port}/?{query}")
        deadline, state = time.monotonic() + 60, {}
        while time.monotonic() < deadline:
            state = json.loads(browser.eval(PAGE_STATE) or "{}")
            if state.get("done"):
                break
            time.sleep(0.2)
        if shot:
            browser.eval("document.querySelectorAll('#heatmap .row:not(.head)')[2]"
                         "?.dispatchEvent(new Event('mouseenter'))")
            browser.screenshot(shot)
        return state
    finally:
        browser.close()


def check_page(binary, server, shots):
    """The page sends `q` from its query string; its text and rows must match the API."""
    max_tokens, budget = 48, 4
    query = f"q={PROMPT}&max={max_tokens}&budget={budget}&think=1"
    messages = [{"role": "user", "content": PROMPT}, {"role": "assistant", "content": "<think>\n"}]
    api = chat(server, messages=messages, max_tokens=max_tokens,
               extra_body={"continue_final_message": True, "thinking_budget": budget})
    want_reasoning = (api.choices[0].message.model_extra or {}).get("reasoning_content") or ""
    for width, height in ((1280, 900), (390, 844)):
        shot = shots / f"serve-page-{width}.png" if shots else None
        state = run_page(binary, server, query, (width, height), shot)
        check(state.get("done") == "1", f"page at {width}px: the stream finished")
        check(state.get("answer") == api.choices[0].message.content
              and state.get("thinking") == want_reasoning,
              f"page at {width}px: answer and thinking pane = the API's")
        check(state.get("rows") == api.usage.completion_tokens,
              f"page at {width}px: one heatmap row per token ({state.get('rows')})")


def load_run(server, requests, concurrency=16, max_tokens=32):
    """`requests` chat requests, `concurrency` at a time, each a different prompt."""
    def one(i):
        start = time.monotonic()
        r = chat(server, messages=[{"role": "user", "content": f"Request {i}: hello"}],
                 max_tokens=max_tokens)
        return time.monotonic() - start, r.usage.completion_tokens

    start = time.monotonic()
    with futures.ThreadPoolExecutor(concurrency) as pool:
        results = list(pool.map(one, range(requests)))
    wall = time.monotonic() - start
    latencies = sorted(t for t, _ in results)
    tokens = sum(n for _, n in results)
    pick = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))]
    print(f"load run on {server.id}: {requests} requests, {concurrency} at a time, "
          f"max_tokens {max_tokens}: p50 {pick(0.5):.3f} s, p99 {pick(0.99):.3f} s, "
          f"{tokens} tokens in {wall:.2f} s = {tokens / wall:.0f} tokens/s")
    check(len(results) == requests, "load run: every request answered")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--anatomy", required=True)
    ap.add_argument("--chromium")
    ap.add_argument("--screenshots", type=Path)
    ap.add_argument("--requests", type=int, default=200)
    args = ap.parse_args()
    print(f"openai {openai.__version__}")
    server = Server(args.anatomy, MOE)
    try:
        check_client(server)
        check_concurrency(server)
        check_errors(server)
        check_budget(server)
        if args.chromium:
            check_page(args.chromium, server, args.screenshots)
        else:
            check(False, "chromium is needed for the page check (--chromium)")
        load_run(server, args.requests)
    finally:
        server.close()
    if SMOLLM2.is_file():
        server = Server(args.anatomy, SMOLLM2)
        try:
            check_client(server)
            load_run(server, 16, max_tokens=16)
        finally:
            server.close()
    else:
        print(f"skipped SmolLM2: {SMOLLM2} is absent (bash scripts/get-real-models.sh)")
    if FAILURES:
        print(f"{len(FAILURES)} check(s) failed", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
