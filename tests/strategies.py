"""Hypothesis strategies shared by the record-core tests."""

from hypothesis import strategies as st

maybe_bytes = st.one_of(st.none(), st.binary(max_size=64))
header = st.tuples(st.text(max_size=12), maybe_bytes)
timestamp = st.integers(min_value=-1, max_value=2**52)

record = st.tuples(
    maybe_bytes,                          # key
    maybe_bytes,                          # value
    st.lists(header, max_size=4),         # headers
    timestamp,                            # timestamp_ms
)
records = st.lists(record, min_size=1, max_size=40)
compression = st.sampled_from([None, "gzip", "snappy", "lz4", "zstd"])
producer = st.one_of(
    st.just((-1, -1, -1)),
    st.tuples(
        st.integers(0, 2**63 - 1),
        st.integers(0, 2**15 - 1),
        st.integers(0, 2**31 - 1),
    ),
)
