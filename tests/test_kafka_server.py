"""The pure parts of the Apache Kafka launcher (memstream/adapters/kafka_server.py): the
server.properties it renders and the cluster ids it makes. Starting the broker is issue 28's
parametrised fixture, not this file."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import pytest

from memstream.adapters.kafka_server import KAFKA_VERSION, cluster_id, new_cluster_id, render_properties


def parse(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines())


def test_properties_bind_both_listeners_to_loopback_and_keep_the_log_in_the_data_dir() -> None:
    props = parse(render_properties(19092, 19093, Path("/data/kafka/log")))
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:19092"
    assert props["controller.quorum.bootstrap.servers"] == "127.0.0.1:19093"
    assert props["process.roles"] == "broker,controller"
    assert props["log.dirs"] == "/data/kafka/log"


def test_properties_give_internal_topics_one_replica() -> None:
    props = parse(render_properties(1, 2, Path("x")))
    one = [key for key in props if key.endswith(("replication.factor", "min.isr", "min.insync.replicas"))]
    assert len(one) == 6 and all(props[key] == "1" for key in one)
    assert props["group.initial.rebalance.delay.ms"] == "0"


def test_cluster_id_is_kafkas_uuid_text() -> None:
    assert cluster_id(bytes(16)) == "AAAAAAAAAAAAAAAAAAAAAA"
    assert cluster_id(b"\xfb" * 16) == base64.urlsafe_b64encode(b"\xfb" * 16).decode()[:22]
    with pytest.raises(ValueError):
        cluster_id(bytes(15))


def test_new_cluster_ids_are_22_url_safe_characters_not_starting_with_a_dash() -> None:
    ids = {new_cluster_id() for _ in range(200)}
    assert len(ids) == 200
    assert all(re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_-]{21}", i) for i in ids)


def test_version_matches_the_pom() -> None:
    pom = (Path(__file__).parents[1] / "deploy" / "kafka" / "pom.xml").read_text()
    assert f"<kafka.version>{KAFKA_VERSION}</kafka.version>" in pom


def test_auto_takes_kafka_only_where_its_jars_are(tmp_path: Path) -> None:
    from memstream.adapters.embedded_broker import broker_kind
    from memstream.adapters.kafka_server import missing
    from memstream.adapters.settings import KafkaSettings, Settings

    jar = tmp_path / "libs" / f"kafka_2.13-{KAFKA_VERSION}.jar"
    assert broker_kind(Settings(kafka=KafkaSettings(broker="auto", kafka_libs=jar.parent))) == "tansu"
    assert "run `make kafka`" in (missing(jar.parent) or "")
    jar.parent.mkdir()
    jar.touch()
    expected = "tansu" if missing(jar.parent) else "kafka"  # no java on this machine: still tansu
    assert broker_kind(Settings(kafka=KafkaSettings(broker="auto", kafka_libs=jar.parent))) == expected
    assert broker_kind(Settings(kafka=KafkaSettings(broker="tansu", kafka_libs=jar.parent))) == "tansu"
    assert broker_kind(Settings(kafka=KafkaSettings(broker="kafka", kafka_libs=tmp_path / "none"))) == "kafka"
