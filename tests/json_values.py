"""A hypothesis strategy for any JSON value (nested lists and objects of every scalar kind), for the property
tests that post arbitrary bodies to the HTTP doors."""

from __future__ import annotations

from hypothesis import strategies as st

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
