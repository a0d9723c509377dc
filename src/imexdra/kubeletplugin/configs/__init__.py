"""A claim's opaque device configs: which results each applies to, and applying them."""
