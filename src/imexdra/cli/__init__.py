"""The ``imexdra`` command: rack demo, status and diagnosis against any cluster."""
