"""A component process's lifecycle: signals, supervised tasks, being PID 1, the termination message."""
