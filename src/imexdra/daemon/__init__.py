"""The per-node, per-domain supervisor of nvidia-imex (``compute-domain-daemon``).

- ``main``: the command line (global flags, ``run``, ``check``); ``options``: file locations.
- ``run``: the run sequence; ``podlabel``: the clique-ID label on its own pod (its only API write).
- ``peers`` → ``membership``: learning peers and its own index from what the controller publishes.
- ``planning`` (pure) → ``updater``: hosts file / node list rewrites and start, SIGUSR1 or restart.
- ``supervisor``: keeps nvidia-imex running (backoff, paced SIGUSR1, termination forwarding).
- ``imexconfig``, ``hostsfile``: the files IMEX reads; ``check``: the readiness probe.
"""
