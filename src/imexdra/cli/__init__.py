"""The ``imexdra`` command: status and diagnosis against any cluster, and the commands installed ones add."""
