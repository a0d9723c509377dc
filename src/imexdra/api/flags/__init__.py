"""Flags and environment variables of the three binaries, as reusable click option groups.

Each group turns a few options into one frozen, validated settings object and hands it to the command
as a single keyword argument, so every binary composes only the groups it needs (``common`` for all,
``kubelet_plugin``, ``controller`` and ``daemon`` for one each). Flag and variable names are
upstream's (docs/compatibility.md §2.8); values are checked before the
command runs and a bad one is a click usage error naming the flag and its variable.
"""
