"""Reading the JSON object out of a model's answer (memstream/adapters/llm/answer.py): code fences
and prose around it, as servers without a response format send it."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from memstream.adapters.llm.answer import json_object_text

scalars = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
objects = st.dictionaries(st.text(), values, max_size=5)
# Prose before the object holds no "{" (else it could open an object of its own); none holds a fence.
prose_before = st.text(alphabet=st.characters(blacklist_characters="{`"))
prose_after = st.text(alphabet=st.characters(blacklist_characters="`"))
dumps = st.sampled_from([{}, {"indent": 2}, {"ensure_ascii": False}])


@given(objects, prose_before, prose_after, dumps)
def test_the_object_is_found_in_prose(
    obj: dict[str, Any], before: str, after: str, style: dict[str, Any]
) -> None:
    assert json.loads(json_object_text(before + json.dumps(obj, **style) + after)) == obj


@given(
    objects,
    st.text(alphabet=st.characters(blacklist_characters="`")),
    prose_after,
    st.sampled_from(["json", "JSON", ""]),
)
def test_the_object_in_a_code_fence_wins(obj: dict[str, Any], before: str, after: str, lang: str) -> None:
    # Prose before the fence may hold braces, even a whole other object: the fenced one is the answer.
    answer = f'{before} {{"decoy": 1}}\n```{lang}\n{json.dumps(obj, indent=2)}\n```{after}'
    assert json.loads(json_object_text(answer)) == obj


@given(st.text(alphabet=st.characters(blacklist_characters="{")))
def test_an_answer_without_an_object_is_returned_unchanged(answer: str) -> None:
    assert json_object_text(answer) == answer


def test_a_cut_object_is_not_completed() -> None:
    # Cut at the token limit: nothing to extract, so validation reports the model's own words.
    assert json_object_text('```json\n{"facts": ["ran 10k", "with') == '```json\n{"facts": ["ran 10k", "with'
    assert json_object_text('[1, 2] then {"a": [1]} and {"b": 2}') == '{"a": [1]}'
