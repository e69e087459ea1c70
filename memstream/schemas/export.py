"""Export JSON Schemas from the models; CI compares them with the committed copies."""

from __future__ import annotations

from pathlib import Path

import orjson

from memstream.schemas.events import Record, Unit
from memstream.schemas.memory import Memory
from memstream.schemas.topics import ALL_TOPICS

JSON_DIR = Path(__file__).parent / "json"


def exported_models() -> list[type[Record]]:
    # Unit and Memory are not on a topic (they live in the vector store) but are stored contracts too.
    return [spec.model for spec in ALL_TOPICS] + [Unit, Memory]


def render_all() -> dict[str, bytes]:
    """File name -> schema bytes, deterministic (sorted keys, trailing newline)."""
    out: dict[str, bytes] = {}
    for model in exported_models():
        schema = model.model_json_schema(mode="validation")
        out[f"{model.__name__}.schema.json"] = (
            orjson.dumps(schema, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"
        )
    return out


def write_all(directory: Path = JSON_DIR) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, data in render_all().items():
        path = directory / name
        path.write_bytes(data)
        written.append(path)
    return written


def stale(directory: Path = JSON_DIR) -> list[str]:
    """Names of committed schema files that differ from (or are missing for) the models."""
    return [
        name
        for name, data in render_all().items()
        if not (directory / name).exists() or (directory / name).read_bytes() != data
    ]
