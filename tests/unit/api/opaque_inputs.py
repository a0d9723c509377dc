"""Inputs for the opaque-config decoder's property tests, and the one property they check.

Any JSON value, documents that look almost like our configs, and ``assert_valid_or_config_error``: the
decoder either refuses with ``ConfigError`` or returns a valid config that round-trips. The opaque
tests and the fuzz tests both use them.
"""

from hypothesis import strategies as st

from imexdra.api.opaque import (
    ComputeDomainChannelConfig,
    ComputeDomainDaemonConfig,
    decode_opaque_config,
    encode_opaque_config,
)
from imexdra.common.errors import ConfigError

API_VERSION = "resource.nvidia.com/v1beta1"
UID = "9a1c2b9e-0d3f-4c55-8f8a-0d8c3b0b3a11"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=12,
)
plausible_documents = st.fixed_dictionaries(
    {},
    optional={
        "apiVersion": st.sampled_from([API_VERSION, "v1", ""]) | json_values,
        "kind": st.sampled_from(["ComputeDomainChannelConfig", "ComputeDomainDaemonConfig", "GpuConfig"])
        | json_values,
        "domainID": st.sampled_from([UID, "", " "]) | json_values,
        "allocationMode": st.sampled_from(["Single", "All", "", "foo"]) | json_values,
        "extra": json_values,
    },
)


def assert_valid_or_config_error(raw: object, *, strict: bool) -> None:
    try:
        config = decode_opaque_config(raw, strict=strict)
    except ConfigError:
        return
    assert isinstance(config, ComputeDomainChannelConfig | ComputeDomainDaemonConfig)
    config.validate()
    assert decode_opaque_config(encode_opaque_config(config)) == config
