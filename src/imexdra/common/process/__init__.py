"""A component process's lifecycle: signals, supervised tasks, the termination message."""
