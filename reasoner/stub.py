"""An OpenAI-compatible endpoint on 127.0.0.1 that answers, hangs or fails: a stand-in for a model server where what
is measured is how rcalab meets it (a case's time limit under load, in `bench load`; failures, in the tests)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class StubEndpoint:
    """`mode`: `answer` at once; `hang` and answer after `delay` seconds; `fail` (500) or `throttle` (429, come back
    in 100 s); `drip`, a valid reply a byte a second. The reply is `content` as the assistant's message, or `body`
    as it is."""

    def __init__(self, mode: str, content: str = "", body: bytes | None = None,
                 content_type: str = "application/json", delay: float = 30.0):
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("content-length", 0)))
                stub.requests += 1
                if mode == "hang":
                    time.sleep(delay)
                if mode in ("fail", "throttle"):
                    self.send_response(500 if mode == "fail" else 429)
                    if mode == "throttle":
                        self.send_header("retry-after", "100")
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                reply = body if body is not None else json.dumps({
                    "id": "x", "object": "chat.completion", "created": 0, "model": "stub",
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": content}}],
                    "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}}).encode()
                self.send_response(200)
                self.send_header("content-type", content_type)
                self.send_header("content-length", str(len(reply)))
                self.end_headers()
                if mode == "drip":
                    for byte in reply:
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                        time.sleep(1)
                self.wfile.write(reply)

            def log_message(self, *args):
                pass

        class Server(ThreadingHTTPServer):
            def handle_error(self, request, client_address):
                pass  # a client that gave up on a hung request breaks the pipe: expected here

        self.requests = 0
        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> "StubEndpoint":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
