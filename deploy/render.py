"""Render the Helm chart with a values file and sort the manifests: core Kubernetes kinds (checked
strictly by kubernetes-validate, which has their schemas offline) and custom resources
(ServiceMonitor, PrometheusRule, ScaledObject, TriggerAuthentication), whose schemas it does not
have: tests/test_deploy.py checks those by hand (apiVersion, kind, required fields).

    python -m deploy.render VALUES OUT_DIR    # writes OUT_DIR/core.yaml and OUT_DIR/custom.yaml
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "helm" / "memstream"
HELM = ROOT / ".venv" / "bin" / "helm"
CUSTOM_KINDS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),
    ("keda.sh/v1alpha1", "ScaledObject"),
    ("keda.sh/v1alpha1", "TriggerAuthentication"),
}


def render(
    values: Path | None = None, *sets: str, release: str = "memstream", namespace: str = "memstream"
) -> str:
    cmd = [str(HELM), "template", release, str(CHART), "--namespace", namespace]
    if values is not None:
        cmd += ["-f", str(values)]
    for s in sets:
        cmd += ["--set", s]
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def manifests(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def is_custom(doc: dict[str, Any]) -> bool:
    return (doc.get("apiVersion"), doc.get("kind")) in CUSTOM_KINDS


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m deploy.render VALUES OUT_DIR", file=sys.stderr)
        return 2
    values, out = Path(args[0]), Path(args[1])
    out.mkdir(parents=True, exist_ok=True)
    docs = manifests(render(values))
    unknown = [
        f"{d.get('apiVersion')}/{d.get('kind')}"
        for d in docs
        if "." in str(d.get("apiVersion", "")).split("/")[0]
        and not is_custom(d)
        and not str(d.get("apiVersion")).split("/")[0].endswith(".k8s.io")
    ]
    if unknown:
        print(f"custom kinds the checks do not know: {unknown}", file=sys.stderr)
        return 1
    core = [d for d in docs if not is_custom(d)]
    custom = [d for d in docs if is_custom(d)]
    (out / "core.yaml").write_text(yaml.safe_dump_all(core, sort_keys=False))
    (out / "custom.yaml").write_text(yaml.safe_dump_all(custom, sort_keys=False))
    print(f"{values}: {len(core)} core manifests, {len(custom)} custom resources")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
