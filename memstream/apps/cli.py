"""``memstream`` command line. Every command reads the same settings (``MEMSTREAM_*``)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError

from memstream.adapters.settings import FIELDS, Settings, setting_errors, setting_value, unknown_variables
from memstream.apps.status import fetch_status, render_status
from memstream.schemas.events import DEFAULT_TENANT

EPILOG = "Settings come from MEMSTREAM_* environment variables; `memstream config` lists them."


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "func"):
        parser.print_help()
        return 2
    for name, like in unknown_variables([*os.environ, *_dotenv_names()]):
        hint = f"; did you mean {like}?" if like else ""
        print(
            f"memstream: {name} is not a setting, ignored{hint} (`memstream config` lists them)",
            file=sys.stderr,
        )
    try:
        settings = Settings()
    except ValidationError as exc:
        print("memstream: invalid settings:\n  " + "\n  ".join(setting_errors(exc)), file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"memstream: invalid settings: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=settings.worker.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("aiokafka").setLevel(max(logging.WARNING, logging.getLogger().level))
    try:
        code = int(args.func(args, settings) or 0)
        sys.stdout.flush()  # inside the try: a closed pipe shows here, not as a traceback at exit
        return code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`memstream status --json | head`): nothing more to say, and
        # stdout must not be flushed into the closed pipe at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def _dotenv_names() -> list[str]:
    from dotenv import dotenv_values

    return list(dotenv_values(".env")) if Path(".env").is_file() else []


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="memstream",
        description="Event-streaming long-term memory for LLM agents: turns flow through Kafka into a "
        "recurrence-buffered Qdrant store; consolidation runs only when a topic recurs or a window closes.",
        epilog=EPILOG,
    )
    p.add_argument("--version", action="version", version=f"memstream {metadata.version('memstream')}")
    sub = p.add_subparsers(title="commands", metavar="COMMAND")
    # In the order ``--help`` lists them.
    _add_serving(sub)
    _add_pipeline(sub)
    _add_eval(sub)
    _add_users(sub)
    _add_development(sub)
    _add_samples_and_settings(sub)
    return p


def _add_serving(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """up, gateway, mcp: the processes."""
    up = sub.add_parser(
        "up", help="run the pipeline (embedded broker and store unless configured)", epilog=EPILOG
    )
    up.add_argument(
        "--workers", type=int, help="worker processes sharing the partitions (default MEMSTREAM_WORKERS)"
    )
    up.add_argument(
        "--port", type=int, help="the gateway's port, 0 for none (default MEMSTREAM_GATEWAY_PORT)"
    )
    up.add_argument("--data-dir", type=Path, help="store, tables and broker log (default MEMSTREAM_DATA_DIR)")
    up.add_argument(
        "--broker", choices=["auto", "kafka", "tansu"], help="embedded broker (default MEMSTREAM_BROKER)"
    )
    up.set_defaults(func=_cmd_up)

    gw = sub.add_parser(
        "gateway",
        help="run the HTTP query gateway alone (memstream up starts one too)",
        description="The stateless query gateway: POST /v1/turns, /v1/recall, /v1/answer, agent tools, "
        "timeline, live updates (SSE), DELETE of a user. OpenAPI at /openapi.json, docs at /docs.",
        epilog=EPILOG,
    )
    gw.add_argument("--port", type=int, help="port (default MEMSTREAM_GATEWAY_PORT)")
    gw.set_defaults(func=_cmd_gateway)

    mc = sub.add_parser(
        "mcp",
        help="serve the gateway's memory as MCP tools (stdio, or streamable HTTP)",
        description="A Model Context Protocol server: add_memory, recall, forget and the four REMem tools "
        "(semantic_retrieve, lexical_retrieve, find_memory_contexts, find_entity_contexts), each one request "
        "to the gateway at MEMSTREAM_GATEWAY_URL (default http://127.0.0.1:MEMSTREAM_GATEWAY_PORT) under the "
        "API key MEMSTREAM_API_KEY; over HTTP a caller's own key (Authorization: Bearer, X-API-Key) is used "
        "instead. Needs the mcp extra: pip install 'memstream[mcp]'.",
        epilog=EPILOG,
    )
    mc.add_argument("--transport", choices=["stdio", "http"], default="stdio", help="default stdio")
    mc.add_argument("--host", default="127.0.0.1", help="HTTP: address to listen on (default 127.0.0.1)")
    mc.add_argument("--port", type=int, default=8090, help="HTTP: port (default 8090); the path is /mcp")
    mc.set_defaults(func=_cmd_mcp)


def _add_pipeline(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """replay, status, cost, reindex: a running (or stopped) pipeline."""
    rp = sub.add_parser("replay", help="produce a conversation file to the turns topic", epilog=EPILOG)
    rp.add_argument("file", type=Path)
    rp.add_argument(
        "--format", choices=["jsonl", "locomo"], default="jsonl", help="file format (default jsonl)"
    )
    rp.add_argument(
        "--tenant",
        default=DEFAULT_TENANT,
        help="tenant for locomo files (default %(default)r, the tenant a gateway without API keys reads; "
        "jsonl lines carry their own)",
    )
    rp.add_argument("--wait", action="store_true", help="wait until the pipeline has processed every turn")
    rp.add_argument("--timeout", type=float, default=600.0, help="seconds to wait with --wait (default 600)")
    rp.set_defaults(func=_cmd_replay)

    st = sub.add_parser(
        "status", help="counts, lag, consolidation requests and windows of a running pipeline"
    )
    st.add_argument("--json", action="store_true", help="print JSON")
    st.set_defaults(func=_cmd_status)

    co = sub.add_parser(
        "cost", help="LLM calls and tokens per stage, per tenant and per 1,000 turns, vs eager extraction"
    )
    co.add_argument("--json", action="store_true", help="print JSON")
    co.set_defaults(func=_cmd_cost)

    ri = sub.add_parser(
        "reindex", help="rebuild the memories collection from the memory.updates topic (pipeline stopped)"
    )
    ri.set_defaults(func=_cmd_reindex)


def _add_eval(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """eval locomo, eval consolidation: the benchmarks."""
    ev = sub.add_parser(
        "eval",
        help="score memstream on a benchmark: recall at token budgets against flat retrieval (locomo), "
        "consolidated memory against gold annotations (consolidation)",
    )
    evs = ev.add_subparsers(title="benchmarks", metavar="BENCHMARK")
    _add_eval_locomo(evs)
    _add_eval_consolidation(evs)


def _add_eval_locomo(evs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """eval locomo: recall at token budgets against flat retrieval."""
    lo = evs.add_parser(
        "locomo",
        help="LoCoMo-format JSON: each conversation one user, every question asked",
        description=(
            "Ingest and consolidate a LoCoMo-format file in process on a fresh store (the configured "
            "embedder and writer), ask every question through recall, and fill the same budgets with "
            "flat baselines over the user's raw turns (hybrid 0.9 cosine + 0.1 BM25, dense, BM25) and "
            "with the evidence turns alone (oracle). Scores per budget and category: text = share of "
            "evidence turns whose content is in the returned texts (>= 50% of the turn's word "
            "trigrams); answer = share of the gold answer's content words in the context's first "
            "budget x 4 characters; id = share of evidence ids among the items' source_turn_ids "
            "(memstream only)."
        ),
        epilog="Example: memstream eval locomo locomo_dev.json --budget 500 1000 --json report.json",
    )
    lo.add_argument("data", type=Path, help="the LoCoMo-format JSON file")
    lo.add_argument(
        "--budget",
        type=int,
        nargs="+",
        default=[500, 1000, 2000],
        help="token budgets (default: 500 1000 2000)",
    )
    lo.add_argument(
        "--json",
        type=Path,
        dest="out",
        metavar="OUT",
        help="write the full report here: the means, and per question its evidence turns, gold answer, "
        "and per budget and system the returned items or turns, the context and every score",
    )
    lo.add_argument(
        "--tenant",
        default=DEFAULT_TENANT,
        help="tenant the conversations are stored under (default %(default)r, the tenant a gateway without "
        "API keys reads)",
    )
    lo.set_defaults(func=_cmd_eval_locomo)


def _add_eval_consolidation(evs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """eval consolidation: consolidated memory against gold annotations."""
    cn = evs.add_parser(
        "consolidation",
        help="LoCoMo-format JSON: consolidated memory against the gold observations, summaries and events",
        description=(
            "Start a fresh `memstream up` (embedded broker and store in a temporary directory; the "
            "configured "
            "embedder and writer), replay the file into it (each conversation one user), wait until every "
            "session closed and consolidation settled, read each user's memory through the gateway's "
            "timeline, stop it, and score: gold observations held by level-1 memory (facts, episodes, "
            "observations), by facts alone and by the raw turns at their dia_ids; level-1 tokens against "
            "the raw conversation's; session nodes against the gold session summaries (ROUGE-1 F1, ROUGE-2 "
            "recall) and against the lead of the same length; gold events held by day and week nodes; "
            "session splits; markup in headers. A statement is held when one text holds >= 50% of its "
            "distinct content words (lowercase words, possessive 's stripped, scikit-learn's English stop "
            "words removed, the speaker's name left out). Prints a table; progress goes to stderr."
        ),
        epilog="Example: memstream eval consolidation locomo_dev.json --json report.json",
    )
    cn.add_argument(
        "data",
        type=Path,
        help="the LoCoMo-format JSON file (with observation, session_summary, event_summary)",
    )
    cn.add_argument(
        "--json",
        type=Path,
        dest="out",
        metavar="OUT",
        help="write the full report here: the aggregates, per conversation its counts, per-session scores, "
        "splits, markup headers and examples (gold statement, best-matching memory text)",
    )
    cn.add_argument(
        "--idle-close",
        type=float,
        default=20.0,
        metavar="S",
        help="MEMSTREAM_IDLE_CLOSE_S of the pipeline it starts, so each conversation's last session closes "
        "(default %(default)s s; a session whose turns wait longer in the worker closes early: a split)",
    )
    cn.add_argument(
        "--timeout", type=float, default=1800.0, metavar="S", help="give up after this long (default 1800 s)"
    )
    cn.add_argument(
        "--conversations",
        type=int,
        metavar="N",
        help="only the file's first N conversations (default: all)",
    )
    cn.add_argument(
        "--sessions",
        type=int,
        metavar="N",
        help="only each conversation's first N sessions, scored against their own gold annotations (default: "
        "all); a small sample for a slow writer, such as a local LLM",
    )
    cn.set_defaults(func=_cmd_eval_consolidation)


def _add_users(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """users, forget: the stored users."""
    us = sub.add_parser(
        "users",
        help="the stored users (tenant/user_id), with --invalid those no user route can address",
        description="List the user keys holding units or memories, read as the gateway reads the stores "
        "(the pipeline running, or the Qdrant server). --invalid lists only those whose user_id POST "
        "/v1/turns now refuses (a '/', or '.' or '..'): stored before ids had to be one URL path segment, "
        "they cannot be reached or deleted through the gateway; erase them with `memstream forget`.",
        epilog=EPILOG,
    )
    us.add_argument("--invalid", action="store_true", help="only the users no user route can address")
    us.add_argument(
        "--tenant",
        action="append",
        help="a tenant to read (repeatable; default: the tenants of MEMSTREAM_API_KEYS, else 'default')",
    )
    us.set_defaults(func=_cmd_users)

    fo = sub.add_parser(
        "forget",
        help="forget one user by its key tenant/user_id, as DELETE /v1/users/{user_id} does",
        description="Delete every unit and memory of the user and record a tombstone on the tombstones "
        "topic, so the workers drop the user's state and whatever of theirs is still on its way: the "
        "gateway's DELETE, for any stored user, including those `memstream users --invalid` lists.",
        epilog=EPILOG,
    )
    fo.add_argument("--user-key", required=True, help="tenant/user_id, as `memstream users` prints it")
    fo.set_defaults(func=_cmd_forget)


def _add_development(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """broker, calibrate, topics, schemas: development and operations."""
    br = sub.add_parser(
        "broker", help="run the embedded broker (MEMSTREAM_BROKER: Kafka or Tansu) on 127.0.0.1 (development)"
    )
    br.add_argument("--port", type=int, help="port (default MEMSTREAM_EMBEDDED_BROKER_PORT)")
    br.set_defaults(func=_cmd_broker)

    ca = sub.add_parser("calibrate", help="show the neighbour-similarity distribution and suggest theta_sim")
    ca.add_argument("file", type=Path)
    ca.add_argument("--format", choices=["jsonl", "locomo"], default="jsonl")
    ca.add_argument("--json", action="store_true", help="print the report as JSON")
    ca.set_defaults(func=_cmd_calibrate)

    tp = sub.add_parser("topics", help="the pipeline's Kafka topics")
    tps = tp.add_subparsers(title="actions", metavar="ACTION")
    tc = tps.add_parser(
        "create",
        help="create missing topics (partitions, replication, retention from the settings); idempotent",
        description="Create every missing topic with MEMSTREAM_TOPIC_PARTITIONS partitions, "
        "MEMSTREAM_TOPIC_REPLICATION_FACTOR replicas and MEMSTREAM_TOPIC_RETENTION_MS; set the retention "
        "of existing topics where it differs. Fails if an existing topic has another partition count "
        "(never changed here: users' records and state are placed by partition).",
        epilog=EPILOG,
    )
    tc.set_defaults(func=_cmd_topics_create)

    sc = sub.add_parser("schemas", help="JSON Schemas of the topic records")
    scs = sc.add_subparsers(title="actions", metavar="ACTION")
    ex = scs.add_parser("export", help="write schemas/json/*.schema.json from the models")
    ex.add_argument("--check", action="store_true", help="fail if the committed files differ from the models")
    ex.add_argument("--dir", type=Path, help="output directory (default: the package's schemas/json)")
    ex.set_defaults(func=_cmd_schemas_export)


def _add_samples_and_settings(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """sample, demo, config."""
    sa = sub.add_parser(
        "sample",
        help="write the synthetic sample conversation set as JSONL",
        description="Write coherent user/assistant chats (a move, a new job, weekly hobbies, time "
        "expressions true to each turn's date) as JSONL turns for `memstream replay`.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    sa.add_argument("out", type=Path, help="the JSONL file to write")
    sa.add_argument("--users", type=int, default=5, help="how many users")
    sa.add_argument("--days", type=int, default=45, help="days of conversation per user")
    sa.add_argument("--seed", type=int, default=7, help="random seed: the same seed writes the same file")
    sa.set_defaults(func=_cmd_sample)

    de = sub.add_parser("demo", help="run everything on the bundled sample set and print what happened")
    de.add_argument("--file", type=Path, help="JSONL turns to replay (default: examples/sample.jsonl)")
    de.set_defaults(func=_cmd_demo)

    cf = sub.add_parser("config", help="list every setting with its environment variable and value")
    cf.add_argument("--markdown", action="store_true", help="print the table of docs/configuration.md")
    cf.set_defaults(func=_cmd_config)


def _cmd_up(args: argparse.Namespace, settings: Settings) -> int:
    from memstream.adapters.broker import BrokerError
    from memstream.apps.runtime import run_up

    # A flag is its variable, set for this process and the workers and gateway it starts.
    flags = {
        "WORKERS": args.workers,
        "GATEWAY_PORT": args.port,
        "DATA_DIR": args.data_dir,
        "BROKER": args.broker,
    }
    given = {f"MEMSTREAM_{name}": str(value) for name, value in flags.items() if value is not None}
    before = {name: os.environ.get(name) for name in given}
    os.environ.update(given)
    try:
        if given:
            settings = Settings()
        return run_up(settings)
    except ValidationError as exc:
        print("memstream: invalid settings:\n  " + "\n  ".join(setting_errors(exc)), file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"memstream: {exc}", file=sys.stderr)
        return 2
    except BrokerError as exc:  # e.g. the port taken, by another `up` on this data dir
        print(f"memstream: embedded broker: {exc}", file=sys.stderr)
        return 1
    finally:  # a caller in this process (a test) gets its environment back
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _cmd_gateway(args: argparse.Namespace, settings: Settings) -> int:
    import uvicorn

    from memstream.apps.gateway.app import create_app
    from memstream.apps.gateway.headers import HeadersBy

    port = args.port if args.port is not None else settings.gateway.gateway_port
    if not port:
        print("memstream: no gateway port (MEMSTREAM_GATEWAY_PORT is 0)", file=sys.stderr)
        return 2
    uvicorn.run(
        create_app(settings),
        host=settings.gateway.gateway_host,
        port=port,
        log_level=settings.worker.log_level.lower(),
        access_log=False,  # request lines carry user ids; /metrics counts requests instead
        # Headers: at most 16 KiB (h11), within MEMSTREAM_GATEWAY_BODY_TIMEOUT_S (HeadersBy:
        # uvicorn has no deadline for them); the body has as long again (the gateway's Gate).
        http=HeadersBy.within(settings.gateway.gateway_body_timeout_s),
        h11_max_incomplete_event_size=16 * 1024,
    )
    return 0


def _cmd_mcp(args: argparse.Namespace, settings: Settings) -> int:
    try:
        from memstream.apps.mcp_server import Transport, serve
    except ModuleNotFoundError as exc:
        print(f"memstream mcp needs the mcp extra (pip install 'memstream[mcp]'): {exc}", file=sys.stderr)
        return 2
    url = os.environ.get("MEMSTREAM_GATEWAY_URL") or f"http://127.0.0.1:{settings.gateway.gateway_port}"
    transport: Transport = "stdio" if args.transport == "stdio" else "streamable-http"
    serve(url, os.environ.get("MEMSTREAM_API_KEY") or None, transport, args.host, args.port)
    return 0


def _cmd_replay(args: argparse.Namespace, settings: Settings) -> int:
    from memstream.apps.datasets import read_records
    from memstream.apps.replay import replay

    if not args.file.exists():
        print(f"memstream: no such file: {args.file}", file=sys.stderr)
        return 2
    records = list(read_records(args.file, args.format, tenant=args.tenant))
    report = asyncio.run(
        replay(
            settings,
            records,
            total=len(records),
            wait=args.wait,
            wait_timeout=args.timeout,
            progress=sys.stderr.isatty(),
        )
    )
    print(f"produced {report.produced} turns in {report.seconds:.2f}s ({report.rate:,.0f} turns/s)")
    if report.processed is False:
        print(f"memstream: not all turns were processed within {args.timeout:.0f}s", file=sys.stderr)
        return 1
    if report.processed:
        print(f"processed by the pipeline after {report.wait_seconds:.2f}s more")
    return 0


def _cmd_status(args: argparse.Namespace, settings: Settings) -> int:
    if not settings.worker.metrics_port:
        print("memstream: MEMSTREAM_METRICS_PORT is 0, so workers serve no status", file=sys.stderr)
        return 2
    try:
        status = fetch_status(settings)
    except (urllib.error.URLError, OSError) as exc:
        print(
            f"memstream: no pipeline answers on 127.0.0.1:{settings.worker.metrics_port} ({exc}); "
            "is `memstream up` running (with the same MEMSTREAM_WORKERS)?",
            file=sys.stderr,
        )
        return 1
    if args.json:
        print(orjson.dumps(status, option=orjson.OPT_INDENT_2).decode())
    else:
        print(render_status(status))
    return 0


def _cmd_cost(args: argparse.Namespace, settings: Settings) -> int:
    from memstream.apps.cost import cost_report, render

    try:
        report = cost_report(fetch_status(settings))
    except (urllib.error.URLError, OSError) as exc:
        print(f"memstream: no pipeline answers ({exc}); is `memstream up` running?", file=sys.stderr)
        return 1
    print(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() if args.json else render(report))
    return 0


def _cmd_eval_locomo(args: argparse.Namespace, settings: Settings) -> int:
    from memstream.apps.evaluate import evaluate, format_table

    if not args.data.exists():
        print(f"memstream: no such file: {args.data}", file=sys.stderr)
        return 2
    report = asyncio.run(
        evaluate(
            settings,
            args.data,
            args.budget,
            tenant=args.tenant,
            progress=sys.stderr.isatty(),
        )
    )
    if args.out:
        args.out.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
    print(format_table(report))
    return 0


def _cmd_eval_consolidation(args: argparse.Namespace, settings: Settings) -> int:
    from memstream.apps.eval_consolidation import BadData, evaluate, format_table

    if not args.data.exists():
        print(f"memstream: no such file: {args.data}", file=sys.stderr)
        return 2
    if args.idle_close <= 0 or args.timeout <= 0:
        print("memstream: --idle-close and --timeout must be positive", file=sys.stderr)
        return 2
    if any(n is not None and n < 1 for n in (args.conversations, args.sessions)):
        print("memstream: --conversations and --sessions must be at least 1", file=sys.stderr)
        return 2
    try:
        report = evaluate(
            settings,
            args.data,
            args.idle_close,
            args.timeout,
            conversations=args.conversations,
            sessions=args.sessions,
        )
    except BadData as exc:
        print(f"memstream: {exc}", file=sys.stderr)
        return 2
    if args.out:
        args.out.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
    print(format_table(report))
    return 0


def _cmd_reindex(args: argparse.Namespace, settings: Settings) -> int:
    from memstream.apps.reindex import reindex

    result = asyncio.run(reindex(settings))
    print(f"read {result.updates:,} memory updates; the memories collection now holds {result.memories:,}")
    return 0


_NO_STORE = "the store did not answer ({}); is `memstream up` running (or the Qdrant server reachable)?"


def _cmd_users(args: argparse.Namespace, settings: Settings) -> int:
    from memstream.apps.gateway.forget import configured_tenants, list_users
    from memstream.core.store import StoreUnavailable

    try:
        keys = list_users(settings, args.tenant or configured_tenants(settings), args.invalid)
    except StoreUnavailable as exc:
        print(f"memstream: {_NO_STORE.format(exc)}", file=sys.stderr)
        return 1
    for key in keys:
        print(key)
    return 0


def _cmd_forget(args: argparse.Namespace, settings: Settings) -> int:
    from aiokafka.errors import KafkaError

    from memstream.apps.gateway.forget import forget_key
    from memstream.core.store import StoreUnavailable

    try:
        stone = asyncio.run(forget_key(settings, args.user_key))
    except ValueError as exc:
        print(f"memstream: {exc}", file=sys.stderr)
        return 2
    except StoreUnavailable as exc:
        print(f"memstream: {_NO_STORE.format(exc)}", file=sys.stderr)
        return 1
    except KafkaError as exc:
        # The points are deleted; the tombstone is not recorded: running the command again records it.
        print(
            f"memstream: no tombstone recorded, the broker did not answer ({exc!r}); run it again",
            file=sys.stderr,
        )
        return 1
    print(
        f"forgot {stone.tenant}/{stone.user_id}: {stone.units} units, {stone.memories} memories; "
        "tombstone recorded"
    )
    return 0


def _cmd_broker(args: argparse.Namespace, settings: Settings) -> int:
    import signal
    import time

    from memstream.adapters.broker import BrokerError
    from memstream.adapters.embedded_broker import describe, embedded_broker

    # SIGTERM must unwind the `with` below, or the broker process would outlive us.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    settings.storage.data_dir.mkdir(parents=True, exist_ok=True)
    try:
        with embedded_broker(settings, args.port) as broker:
            print(f"broker on {broker.bootstrap}: {describe(settings)}; Ctrl-C stops it", flush=True)
            while broker.proc and broker.proc.poll() is None:
                time.sleep(0.5)
    except BrokerError as exc:
        print(f"memstream: embedded broker: {exc}", file=sys.stderr)
        return 1
    print("memstream: the broker exited on its own", file=sys.stderr)
    return 1


def _cmd_calibrate(args: argparse.Namespace, settings: Settings) -> int:
    from memstream.adapters.embedders import make_embedder
    from memstream.apps.calibrate import calibrate, render
    from memstream.apps.datasets import read_turns
    from memstream.core.units import render_text

    texts: dict[str, list[str]] = {}
    for turn in sorted(read_turns(args.file, args.format), key=lambda t: t.ts):
        texts.setdefault(turn.key, []).append(render_text(turn.messages))
    embedder = make_embedder(settings.embedding)
    report = calibrate(
        texts, embedder, settings.consolidation.recurrence_top_k, settings.consolidation.theta_count
    )
    print(report.model_dump_json(indent=2) if args.json else render(report))
    return 0


def _cmd_topics_create(args: argparse.Namespace, settings: Settings) -> int:
    from memstream.adapters.kafka import ensure_topics

    if settings.kafka.bootstrap_servers is None:
        print("memstream: MEMSTREAM_BOOTSTRAP_SERVERS is not set", file=sys.stderr)
        return 2
    from aiokafka.errors import KafkaError

    try:
        report = asyncio.run(ensure_topics(settings, update_existing=True))
    except (KafkaError, RuntimeError) as exc:
        print(f"memstream: topics: {exc}", file=sys.stderr)
        return 1
    for name in report.created:
        print(f"created {name}")
    for name in report.existing:
        print(f"exists  {name}{' (retention.ms set)' if name in report.retention_updated else ''}")
    for name, count in report.wrong_partitions.items():
        print(
            f"memstream: {name} has {count} partitions, MEMSTREAM_TOPIC_PARTITIONS is "
            f"{settings.kafka.topic_partitions}",
            file=sys.stderr,
        )
    return 1 if report.wrong_partitions else 0


def _cmd_schemas_export(args: argparse.Namespace, settings: Settings) -> int:
    from memstream.schemas.export import JSON_DIR, stale, write_all

    directory = args.dir or JSON_DIR
    if args.check:
        bad = stale(directory)
        if bad:
            print(f"stale JSON Schemas (run `memstream schemas export`): {', '.join(bad)}", file=sys.stderr)
            return 1
        print("JSON Schemas match the models")
        return 0
    for path in write_all(directory):
        print(path)
    return 0


def _cmd_sample(args: argparse.Namespace, settings: Settings) -> int:
    from memstream.apps.sample_conversations import generate

    n = 0
    with args.out.open("wb") as fh:
        for turn in generate(users=args.users, days=args.days, seed=args.seed):
            fh.write(turn.to_bytes() + b"\n")
            n += 1
    print(f"wrote {n} turns to {args.out}")
    return 0


def _cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    from memstream.apps.demo import SAMPLE, run_demo

    sample = args.file or SAMPLE
    if not sample.exists():
        print(f"memstream: no such file: {sample} (write one with `memstream sample FILE`)", file=sys.stderr)
        return 2
    return run_demo(settings, sample)


def _type_name(annotation: Any) -> str:
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "").replace("pathlib.", "").replace("pydantic.types.", "")


def _cmd_config(args: argparse.Namespace, settings: Settings) -> int:
    if args.markdown:
        print("| variable | group | type | default | meaning |\n| --- | --- | --- | --- | --- |")
    for name, (group, f) in FIELDS.items():
        var = f"MEMSTREAM_{name.upper()}"
        if args.markdown:
            kind = _type_name(f.annotation).replace("|", "\\|")
            default = f.get_default(call_default_factory=True)
            shown = ",".join(default) if isinstance(default, list) else default
            print(f"| `{var}` | {group} | {kind} | `{shown}` | {f.description} |")
        else:
            value = setting_value(settings, name)
            print(f"{var:<36} {'***' if 'KEY' in var and value else value!s:<28} {f.description}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
