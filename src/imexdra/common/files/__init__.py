"""Files shared between processes on a node: a cross-process lock and crash-safe replacement."""
