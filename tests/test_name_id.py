"""name_id is uuid5 under the project namespace, formatted without the UUID object: every stored id
(units, windows, requests, memories) depends on it staying the same."""

from __future__ import annotations

import uuid

from hypothesis import given
from hypothesis import strategies as st

from memstream.schemas.events import NAMESPACE, name_id, unit_id_for


@given(st.text(max_size=200))
def test_name_id_is_uuid5_under_the_namespace(name: str) -> None:
    assert name_id(name) == str(uuid.uuid5(NAMESPACE, name))


def test_unit_ids_are_unchanged() -> None:
    # A unit id stored before name_id existed: redelivered turns must still find their units.
    assert unit_id_for("acme", "u1", "t1") == str(uuid.uuid5(NAMESPACE, "unit/acme/u1/t1"))
    assert len({name_id(str(i))[19] for i in range(200)}) == 4  # every variant digit, 8 9 a b, occurs
