"""Run the Dockerfile's build stage without Docker (there is none in CI): its COPY, WORKDIR, ENV
and RUN instructions are carried out in a temporary directory, with ``/opt``, ``/src`` and
``/wheels`` moved under it and ``python`` the interpreter of this virtual environment's base
(CPython 3.11, like the image). So the pinned locks install with ``--no-deps`` into a fresh venv,
memstream's wheel builds with the pinned backend, and the build stage's own smoke test (every entry
point imports, the MiniLM model loads and embeds) runs, exactly as written in the Dockerfile.

What this does not check: the base image itself, the runtime stage (user, file ownership), and
anything outside Python. hadolint lints the whole file.

    python -m deploy.image_check
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"


def instructions(stage: str) -> list[tuple[str, str]]:
    """(instruction, arguments) of one stage, continuation lines joined, comments dropped."""
    lines: list[str] = []
    for raw in DOCKERFILE.read_text().splitlines():
        if raw.lstrip().startswith("#") and not (lines and lines[-1].endswith("\\")):
            continue
        if lines and lines[-1].endswith("\\"):
            lines[-1] = lines[-1][:-1] + " " + raw.strip()
        elif raw.strip():
            lines.append(raw.strip())
    out: list[tuple[str, str]] = []
    current = None
    for line in lines:
        word, _, rest = line.partition(" ")
        if word.upper() == "FROM":
            current = rest.split()[-1]
            continue
        if current == stage:
            out.append((word.upper(), rest))
    return out


def main() -> int:
    base = Path(getattr(sys, "_base_executable", sys.executable)).resolve()
    with tempfile.TemporaryDirectory(prefix="memstream-image-") as tmp:
        root = Path(tmp)

        def moved(text: str) -> str:
            for path in ("/opt/", "/wheels", "/src"):
                text = text.replace(path, f"{root}{path}")
            return text

        env = {**os.environ, "PATH": f"{base.parent}:{os.environ['PATH']}"}
        for key in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"):
            env.pop(key, None)
        cwd = root
        steps = instructions("build")
        assert steps, "no build stage in deploy/Dockerfile"
        for word, args in steps:
            if word == "ENV":
                for part in shlex.split(args):
                    key, _, value = part.partition("=")
                    env[key] = value
            elif word == "WORKDIR":
                cwd = Path(moved(args))
                cwd.mkdir(parents=True, exist_ok=True)
            elif word == "COPY":
                *sources, dest = args.split()
                target = cwd / dest
                for src in sources:
                    origin = ROOT / src
                    where = target / origin.name if dest.endswith("/") or len(sources) > 1 else target
                    where.parent.mkdir(parents=True, exist_ok=True)
                    if origin.is_dir():
                        shutil.copytree(origin, where, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
                    else:
                        shutil.copy2(origin, where)
            elif word == "RUN":
                command = moved(args).replace("python -m venv", f"{base} -m venv")
                print(f"RUN {args[:100]}{'...' if len(args) > 100 else ''}", flush=True)
                done = subprocess.run(
                    ["bash", "-ec", command], cwd=cwd, env=env, capture_output=True, text=True
                )
                noise = ("WARNING: Location ", "WARNING: Skipping ")
                sys.stderr.write(
                    "".join(ln for ln in done.stderr.splitlines(True) if not ln.startswith(noise))
                )
                if done.returncode:
                    sys.stdout.write(done.stdout[-4000:])
                    print(f"the build stage failed at: RUN {args}", file=sys.stderr)
                    return 1
            elif word not in ("ARG", "LABEL"):
                print(f"the check does not know {word}; extend deploy/image_check.py", file=sys.stderr)
                return 1
    print("the Dockerfile's build stage ran: locks installed --no-deps, wheel built, model loaded")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
