"""The ``compute-domain-controller`` command line: configuration refused before anything starts."""

from click.testing import CliRunner

from imexdra.controller.main import main
from tests.unit.api.cli import ALL_GROUPS, CONTROLLER_ENV, env_vars

ISOLATED: dict[str, str | None] = dict.fromkeys(env_vars(ALL_GROUPS))


def test_channel_isolation_is_refused_before_startup_with_driver_managed_imex() -> None:
    """IMEX_ISOLATION=channel without host-managed IMEX stops the controller with a usage error saying
    why and what would work."""
    fragments = ["--imex-isolation=channel (IMEX_ISOLATION) needs host-managed IMEX", "already isolates"]
    env = {**ISOLATED, **CONTROLLER_ENV, "FEATURE_GATES": "", "IMEX_ISOLATION": "channel"}
    result = CliRunner().invoke(main, [], env=env)
    assert result.exit_code == 2
    output = " ".join(result.output.split())
    for fragment in fragments:
        assert fragment in output
