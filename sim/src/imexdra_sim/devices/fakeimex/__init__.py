"""Simulated ``nvidia-imex`` and ``nvidia-imex-ctl`` for tests and the demo (not product behaviour).

The fakes are separate programs, like the real ones, and reproduce the IMEX behaviour the driver
depends on (docs/hardware.md §7):

- ``daemon`` (``python -m imexdra_sim.devices.fakeimex.daemon -c <config>``; the node itself is in
  ``server``): reads its config only at start; reads and resolves the node list at start and again on
  SIGUSR1 (at most once per 5 s, extra signals ignored); listens on its own address from the node list
  at ``SERVER_PORT``; probes every peer; reports ``READY`` only while every peer whose entry resolves
  answers with the same node map; serves its state on the command service (``IMEX_CMD_PORT`` /
  ``IMEX_CMD_UNIX_DOMAIN_PATH``).
- ``ctl`` (``python -m imexdra_sim.devices.fakeimex.ctl``): ``-q`` prints ``READY``, ``-N`` the
  connectivity table, ``-N -j`` the same as JSON, talking to the daemon's command service.
- ``install``: writes ``nvidia-imex`` / ``nvidia-imex-ctl`` (one self-contained zip application) into a
  directory, so code that runs the real binaries from ``PATH`` runs the fakes unchanged.

Simulated nodes share one host: every pod has its own loopback address, all of them bindable by any
process, so the fake takes the command-service bind address (the pod IP in the daemon's config) as its
own interface, and it resolves names only through a hosts file (``FAKE_IMEX_HOSTS_FILE``, default
``/etc/hosts``) so an unmapped name fails at once instead of waiting on DNS.
"""
