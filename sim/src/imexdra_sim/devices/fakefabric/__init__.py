"""The fake NVLink fabric: GPU memory export and import gated by the IMEX channel (docs/fake-fabric.md)."""
