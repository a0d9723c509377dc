"""Types every component agrees on: ComputeDomain CRDs, opaque device configs, feature gates, flags.

- ``constants``: upstream's names (API group, kinds, labels, finalizer, DeviceClasses, attributes).
- ``computedomain``, ``computedomainclique``: the custom resources as typed msgspec models of kinds.
- ``opaque``: decoding, validation and encoding of the opaque device configuration kinds.
- ``featuregates``: the gate registry, ``--feature-gates`` parsing and the HostManagedIMEX overrides.
- ``config``: click option groups and frozen settings for the three binaries.

The CRD manifests themselves live in ``deployments/helm/imexdra/crds``.
"""
