"""Credentials of every kubeconfig user kind: tokens, token files, exec plugins, auth-providers."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import json
import pathlib
import ssl
import stat

import pytest

from imexdra.common.errors import ConfigError
from imexdra.common.kube.credentials import CredentialError, Credentials
from imexdra.common.kube.kubeconfig import NameValue, User, UserExec
from imexdra_sim.localcluster.pki import ClusterPKI

V1 = "client.authentication.k8s.io/v1"


def exec_plugin(
    tmp_path: pathlib.Path, *, status: dict[str, object] | None = None, code: int = 0
) -> UserExec:
    """A real executable printing an ExecCredential whose token counts its runs (t1, t2, ...).

    Each run also records the environment variables the plugin saw in ``env-<n>.json``.
    """
    answer = json.dumps({"apiVersion": V1, "kind": "ExecCredential", "status": status or {}})
    script = tmp_path / "plugin.py"
    script.write_text(
        "#!/usr/bin/env python3\n"
        "import json, os, pathlib, sys\n"
        f"d = pathlib.Path({str(tmp_path)!r})\n"
        "n = len(list(d.glob('env-*.json'))) + 1\n"
        "(d / f'env-{n}.json').write_text(json.dumps(dict(os.environ)))\n"
        f"if {code}:\n"
        f"    print('login required', file=sys.stderr); sys.exit({code})\n"
        f"answer = json.loads({answer!r})\n"
        "answer['status'].setdefault('token', f't{n}')\n"
        "print(json.dumps(answer))\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return UserExec(apiVersion=V1, command=str(script), env=[NameValue(name="TEAM", value="a")])


def credentials(user: User | None) -> Credentials:
    return Credentials(user, str)


async def test_fixed_headers() -> None:
    """A token is a bearer header, a username/password pair a basic one; no user sends none."""
    assert await credentials(User(token="abc")).header() == "Bearer abc"
    basic = base64.b64encode(b"me:pw").decode()
    assert await credentials(User(username="me", password="pw")).header() == f"Basic {basic}"
    assert await credentials(None).header() is None
    assert not credentials(User(token="abc")).refreshable


async def test_token_file_is_read_again_after_invalidate(tmp_path: pathlib.Path) -> None:
    """A rotated token file is read again after a 401 (invalidate), not only once a minute."""
    token = tmp_path / "token"
    token.write_text("one\n")
    creds = credentials(User(token_file=str(token)))
    assert await creds.header() == "Bearer one"
    token.write_text("two\n")
    assert await creds.header() == "Bearer one"  # still within the minute
    creds.invalidate()
    assert await creds.header() == "Bearer two"


async def test_exec_plugin_runs_once_until_invalidated(tmp_path: pathlib.Path) -> None:
    """The plugin runs once for concurrent callers, non-interactively, with the kubeconfig's env."""
    creds = credentials(User(exec=exec_plugin(tmp_path)))
    assert creds.refreshable
    assert await asyncio.gather(*(creds.header() for _ in range(5))) == ["Bearer t1"] * 5
    assert await creds.header() == "Bearer t1"
    creds.invalidate()
    assert await creds.header() == "Bearer t2"
    env = json.loads((tmp_path / "env-1.json").read_text())
    assert env["TEAM"] == "a"
    assert json.loads(env["KUBERNETES_EXEC_INFO"]) == {
        "apiVersion": V1,
        "kind": "ExecCredential",
        "spec": {"interactive": False},
    }


async def test_an_expired_exec_token_is_fetched_again(tmp_path: pathlib.Path) -> None:
    """A token whose expirationTimestamp has passed is not reused."""
    past = (dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    creds = credentials(User(exec=exec_plugin(tmp_path, status={"expirationTimestamp": past})))
    assert await creds.header() == "Bearer t1"
    assert await creds.header() == "Bearer t2"


async def test_exec_plugin_failures_say_what_happened(tmp_path: pathlib.Path) -> None:
    """A failing plugin is a retryable error with its stderr; a missing one names its install hint."""
    with pytest.raises(CredentialError, match="exited 3: login required"):
        await credentials(User(exec=exec_plugin(tmp_path, code=3))).header()
    missing = UserExec(apiVersion=V1, command="/nonexistent/kubelogin", installHint="brew install kubelogin")
    with pytest.raises(ConfigError, match="not found \\(brew install kubelogin\\)"):
        await credentials(User(exec=missing)).header()


async def test_exec_plugin_answers_that_are_not_used(tmp_path: pathlib.Path) -> None:
    """A certificate without its key, and an unknown apiVersion, are refused with what is wrong."""
    half = exec_plugin(tmp_path, status={"token": "", "clientCertificateData": "PEM"})
    with pytest.raises(CredentialError, match="certificate without its key"):
        await credentials(User(exec=half)).header()
    old = UserExec(apiVersion="client.authentication.k8s.io/v1alpha1", command="x")
    with pytest.raises(ConfigError, match=r"v1alpha1.*supported: .*v1, .*v1beta1"):
        credentials(User(exec=old))


def client_certificate(tmp_path: pathlib.Path) -> dict[str, object]:
    """An ExecCredential status holding a client certificate and key (PEM) and no token."""
    pair = ClusterPKI(tmp_path / "pki").issue("exec-user", common_name="exec-user")
    return {
        "token": "",
        "clientCertificateData": pair.cert.read_text(),
        "clientKeyData": pair.key.read_text(),
    }


async def test_an_exec_client_certificate_is_loaded_into_the_tls_context(tmp_path: pathlib.Path) -> None:
    """A certificate answer sends no header, loads into the connection's TLS context and moves the
    certificate generation on (each run), so clients drop connections made with the previous one."""
    tls = ssl.create_default_context()
    creds = Credentials(User(exec=exec_plugin(tmp_path, status=client_certificate(tmp_path))), str, tls=tls)
    assert await creds.header() is None
    assert creds.certificate_generation == 1
    assert await creds.header() is None  # no expiry: not run again
    creds.invalidate()
    assert await creds.header() is None
    assert creds.certificate_generation == 2


async def test_an_exec_client_certificate_that_cannot_be_used(tmp_path: pathlib.Path) -> None:
    """Garbage PEM is a retryable error naming the plugin; a certificate for a plain-HTTP server is
    refused with what would work."""
    garbage = exec_plugin(tmp_path, status={"token": "", "clientCertificateData": "x", "clientKeyData": "y"})
    with pytest.raises(CredentialError, match="do not load"):
        await Credentials(User(exec=garbage), str, tls=ssl.create_default_context()).header()
    good = exec_plugin(tmp_path, status=client_certificate(tmp_path))
    with pytest.raises(ConfigError, match="server is not https"):
        await credentials(User(exec=good)).header()


def jwt(expires: dt.datetime) -> str:
    def part(value: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    return f"{part({'alg': 'none'})}.{part({'exp': int(expires.timestamp())})}.sig"


async def test_auth_providers() -> None:
    """oidc sends its id-token unless it has expired; gcp and azure name the plugin that replaced them."""
    now = dt.datetime.now(dt.UTC)
    valid = jwt(now + dt.timedelta(hours=1))
    oidc = {"name": "oidc", "config": {"id-token": valid}}
    assert await credentials(User(auth_provider=oidc)).header() == f"Bearer {valid}"
    expired = {"name": "oidc", "config": {"id-token": jwt(now - dt.timedelta(hours=1))}}
    with pytest.raises(ConfigError, match="id-token in the kubeconfig expired"):
        credentials(User(auth_provider=expired))
    with pytest.raises(ConfigError, match="gke-gcloud-auth-plugin"):
        credentials(User(auth_provider={"name": "gcp"}))
    with pytest.raises(ConfigError, match="kubelogin"):
        credentials(User(auth_provider={"name": "azure"}))
    with pytest.raises(ConfigError, match="has no id-token"):
        credentials(User(auth_provider={"name": "oidc", "config": {}}))
