"""kubectl's and upstream's conventions on every console script (issue 19 item 5).

Aspects covered: ``--version`` on the four scripts; ``compute-domain-daemon <cmd> --help`` without the
required global flags; ``NO_COLOR``; ``--context`` and the context's namespace as ``-n``'s default;
the driver namespace found from the install's labels, never assumed; ``-o yaml|json|wide``; exit codes
that stay clear of click's usage error (2).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import click
import pytest
import yaml
from click.testing import CliRunner

from imexdra.cli import clusterview
from imexdra.cli import main as cli_main
from imexdra.cli.clusterview import (
    EXIT_CLUSTER_ERROR,
    EXIT_NOT_FOUND,
    EXIT_PROBLEMS,
    ClusterAccessError,
    context_namespace,
    find_driver_namespace,
)
from imexdra.cli.status import build_report, render_text
from imexdra.common.kube.models.apps_v1 import DaemonSet, Deployment
from imexdra.common.kube.models.meta_v1 import ObjectMeta
from imexdra.controller.main import main as controller_main
from imexdra.daemon.main import main as daemon_main
from imexdra.kubeletplugin.main import main as plugin_main
from tests.unit.cli import objects as o

SCRIPTS = {
    "imexdra": cli_main.main,
    "compute-domain-controller": controller_main,
    "compute-domain-kubelet-plugin": plugin_main,
    "compute-domain-daemon": daemon_main,
}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_every_console_script_has_version(name: str) -> None:
    """``--version`` answers without any other flag (and without ``-v``, which is klog's verbosity)."""
    result = CliRunner().invoke(SCRIPTS[name], ["--version"], env={"NODE_NAME": None})
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"{name}, version ")


@pytest.mark.parametrize("command", ["run", "check"])
def test_daemon_subcommand_help_needs_no_global_flags(command: str) -> None:
    """``compute-domain-daemon run --help`` explains run although --node-name and the rest are unset."""
    result = CliRunner().invoke(daemon_main, [command, "--help"], env={"NODE_NAME": None})
    assert result.exit_code == 0, result.output
    assert f"Usage: compute-domain-daemon {command} [OPTIONS]" in result.output


def test_daemon_without_its_required_flags_is_still_a_usage_error() -> None:
    """Only help is answered early: running without --node-name fails as before."""
    result = CliRunner().invoke(daemon_main, ["run"], env={"NODE_NAME": None})
    assert result.exit_code == 2
    assert "--node-name" in result.output


@pytest.mark.parametrize(("no_color", "coloured"), [(None, True), ("1", False)])
def test_no_color_turns_colour_off(no_color: str | None, coloured: bool) -> None:
    """A command styling its output prints plain text under NO_COLOR, even on a colour terminal."""

    @click.command("paint")
    def paint() -> None:
        click.echo(click.style("red", fg="red"))

    cli_main.main.add_command(paint)
    try:
        result = CliRunner().invoke(cli_main.main, ["paint"], env={"NO_COLOR": no_color}, color=True)
    finally:
        cli_main.main.commands.pop("paint")
    assert result.exit_code == 0, result.output
    assert ("\x1b[" in result.output) is coloured


def kubeconfig(tmp_path: Path) -> Path:
    """Two contexts: the current one without a namespace, ``team`` with namespace team-a."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [
            {"name": "plain", "context": {"cluster": "c", "user": "u"}},
            {"name": "team", "context": {"cluster": "c", "user": "u", "namespace": "team-a"}},
        ],
        "current-context": "plain",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


def test_namespace_defaults_to_the_contexts(tmp_path: Path) -> None:
    """-n falls back to the namespace of the context in use (``default`` when it names none)."""
    path = kubeconfig(tmp_path)
    assert context_namespace(path, None) == "default"
    assert context_namespace(path, "team") == "team-a"
    with pytest.raises(ClusterAccessError, match="nope"):
        context_namespace(path, "nope")


def test_diagnose_uses_the_contexts_namespace_and_exits_4_for_a_missing_domain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A missing domain is exit code 4 (2 is click's usage error), named in the context's namespace."""
    contexts: list[str | None] = []

    def run_with_client(_kubeconfig: Path | None, _work: Callable[..., Any], *, context: str | None) -> None:
        contexts.append(context)

    monkeypatch.setattr(clusterview, "run_with_client", run_with_client)
    args = ["diagnose", "train", "--kubeconfig", str(kubeconfig(tmp_path)), "--context", "team", "-o", "yaml"]
    result = CliRunner().invoke(cli_main.main, args)
    assert result.exit_code == EXIT_NOT_FOUND == 4, result.output
    assert contexts == ["team"]
    document = yaml.safe_load(result.output)
    assert (document["computeDomain"], document["found"]) == ("team-a/train", False)


def test_exit_codes_never_collide_with_clicks() -> None:
    """Ours are 1 (problems), 3 and 4; click owns 2 for usage errors."""
    assert len({EXIT_PROBLEMS, EXIT_CLUSTER_ERROR, EXIT_NOT_FOUND, 2}) == 4
    assert ClusterAccessError("x").exit_code == EXIT_CLUSTER_ERROR


class _Client:
    """Lists canned objects by resource; records the label selectors asked for."""

    def __init__(self, found: dict[type, list[str]]) -> None:
        self.found = found
        self.selectors: list[dict[str, str]] = []

    async def list(self, resource: type, **selectors: Any) -> AsyncIterator[Any]:
        self.selectors.append(selectors["labels"])
        for namespace in self.found.get(resource, []):
            yield SimpleNamespace(metadata=ObjectMeta(name="x", namespace=namespace))


@pytest.mark.parametrize(
    ("found", "expected"),
    [
        ({DaemonSet: ["gpu-operator"]}, "gpu-operator"),
        ({DaemonSet: ["drv", "drv"], Deployment: ["other"]}, "drv"),
        ({Deployment: ["only-controller"]}, "only-controller"),
    ],
    ids=["plugin-daemonset", "plugin-wins", "controller-only"],
)
async def test_driver_namespace_is_found_from_the_install(
    found: dict[type, list[str]], expected: str
) -> None:
    """The kubelet plugin's DaemonSet names the namespace; else the controller's Deployment."""
    client = _Client(found)
    assert await find_driver_namespace(client, None) == expected  # type: ignore[arg-type]
    assert client.selectors[0] == {
        "app.kubernetes.io/part-of": "imexdra",
        "app.kubernetes.io/component": "kubelet-plugin",
    }


@pytest.mark.parametrize(
    ("found", "message"),
    [({}, "found no imexdra install"), ({DaemonSet: ["a", "b"]}, "several namespaces (a, b)")],
    ids=["none", "several"],
)
async def test_driver_namespace_is_never_guessed(found: dict[type, list[str]], message: str) -> None:
    """No install or several: an error that asks for --driver-namespace; a given one is used as is."""
    with pytest.raises(ClusterAccessError, match="--driver-namespace") as caught:
        await find_driver_namespace(_Client(found), None)  # type: ignore[arg-type]
    assert message in str(caught.value)
    client = _Client({DaemonSet: ["a"]})
    assert await find_driver_namespace(client, "given") == "given"  # type: ignore[arg-type]
    assert client.selectors == []


@pytest.mark.parametrize("output", ["json", "yaml", "wide", "text"])
def test_status_outputs(output: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """-o json and -o yaml give the same document; wide adds the UID columns to the tables."""

    def run_with_client(_kubeconfig: Path | None, _work: Callable[..., Any], *, context: str | None) -> Any:
        return o.snapshot()

    monkeypatch.setattr(clusterview, "run_with_client", run_with_client)
    result = CliRunner().invoke(cli_main.main, ["status", "-o", output])
    assert result.exit_code == 0, result.output
    report = json.loads(json.dumps(build_report(o.snapshot())))
    if output in ("json", "yaml"):
        assert (json.loads if output == "json" else yaml.safe_load)(result.output) == report
    else:
        assert result.output.rstrip("\n") == render_text(build_report(o.snapshot()), wide=output == "wide")
        assert ("UID" in result.output) is (output == "wide")
