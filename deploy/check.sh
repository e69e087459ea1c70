#!/usr/bin/env bash
# `make deploy-check`: every check of the Kubernetes deployment that needs no cluster and no
# Docker. Installs its tools first when missing (deploy/tools.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
PY="$BIN/python"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
step() { printf '\n== %s\n' "$*"; }
start=$(date +%s)

step "tools"
bash deploy/tools.sh 2>&1 | grep -v "^WARNING: Location"

step "generated files match deploy/monitoring.py and the settings (alerts, dashboard, chart schema)"
"$PY" -m deploy.generate --check

step "the image's locks resolve to themselves (pip, resolving each lock alone, installs exactly it)"
"$PY" -m deploy.lock --verify

step "Dockerfile (hadolint)"
"$BIN/hadolint" deploy/Dockerfile && echo "deploy/Dockerfile: no findings"

step "the Dockerfile's build stage, run without Docker (locks --no-deps, wheel, model smoke test)"
"$PY" -m deploy.image_check

step "alert rules (promtool check rules, promtool test rules)"
"$BIN/promtool" check rules deploy/prometheus/memstream-alerts.yaml
"$BIN/promtool" test rules deploy/prometheus/memstream-alerts.test.yaml
"$PY" -m deploy.generate --dashboard-rules "$out/dashboard-queries.yaml"
echo "dashboard queries, as recording rules:"
"$BIN/promtool" check rules "$out/dashboard-queries.yaml"

for values in helm/memstream/ci/minimal-values.yaml deploy/values-production.yaml; do
  name=$(basename "$values" .yaml)
  step "chart with $values: helm lint --strict, helm template, kubernetes-validate --strict"
  "$BIN/helm" lint --strict helm/memstream -f "$values"
  "$PY" -m deploy.render "$values" "$out/$name"
  # The chart's floor (kubeVersion >=1.25) and a current release.
  for k8s in 1.25.0 1.32.0; do
    "$BIN/kubernetes-validate" --strict --quiet -k "$k8s" "$out/$name/core.yaml"
  done
  echo "core manifests valid against Kubernetes 1.25 and 1.32 (custom resources: tests/test_deploy.py)"
done

step "chart tests (tests/test_deploy.py, without the broker)"
"$BIN/pytest" -q -p no:cacheprovider -m "not integration" tests/test_deploy.py

echo
echo "deploy checks passed in $(( $(date +%s) - start ))s"
