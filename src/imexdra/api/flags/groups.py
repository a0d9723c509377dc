"""The option-group mechanism and the value types and checks shared by every group.

An ``OptionGroup`` declares click options with upstream's names and env variables, and builds one
settings object from their values; a ``ConfigError`` from the builder becomes a ``click.BadParameter``
on the option it names. Decorate the command's callback with groups *below* ``@click.command()``:

    @click.command()
    @KUBE_CLIENT
    @FEATURE_GATES
    def main(kube_client: KubeClientSettings, feature_gates: FeatureGates) -> None: ...
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Generic, TypeVar

import click

from imexdra.common.errors import ConfigError

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class Option:
    """The arguments of one ``click.option`` call; env variables are shown in ``--help``."""

    decls: tuple[str, ...]
    attrs: Mapping[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The Python parameter name click derives from the declarations."""
        name = click.Option(list(self.decls), **self.attrs).name
        if not name:
            raise ValueError(f"option {self.decls} declares no name")
        return name

    def apply(self, function: Callable[..., R]) -> Callable[..., R]:
        """Attach this option to a command callback."""
        return click.option(*self.decls, show_envvar=True, **self.attrs)(function)


def option(*decls: str, **attrs: Any) -> Option:
    """Declare one option of a group (same arguments as ``click.option``)."""
    return Option(decls, attrs)


class OptionGroup(Generic[T]):
    """Options that together build one settings object, passed to the command as ``dest``."""

    def __init__(self, dest: str, build: Callable[..., T], *options: Option) -> None:
        """Group ``options``; ``build`` receives their values as keyword arguments."""
        self.dest = dest
        self.options = options
        self._build = build
        self._by_name = {opt.name: opt for opt in options}

    def __call__(self, command: Callable[..., R]) -> Callable[..., R]:
        """Add the options to ``command`` and replace their values by the built settings."""

        @functools.wraps(command)
        def run(*args: Any, **kwargs: Any) -> R:
            values = {name: kwargs.pop(name) for name in self._by_name}
            kwargs[self.dest] = self.build(**values)
            return command(*args, **kwargs)

        decorated: Callable[..., R] = run
        for opt in reversed(self.options):
            decorated = opt.apply(decorated)
        return decorated

    def build(self, **values: Any) -> T:
        """Build the settings, reporting a ``ConfigError`` as a usage error on the option it names."""
        try:
            return self._build(**values)
        except ConfigError as err:
            opt = self._by_name.get(err.field or "")
            if opt is None:
                raise click.UsageError(str(err)) from err
            message = str(err).removeprefix(f"{err.field}: ")
            param = click.Option(list(opt.decls), show_envvar=True, **opt.attrs)
            raise click.BadParameter(message, param=param) from err


class GoDuration(click.ParamType[timedelta]):
    """A Go ``time.Duration`` string such as ``15s``, ``1m30s`` or ``500ms``."""

    name = "duration"
    _UNITS: Mapping[str, float] = {
        "ns": 1e-9,
        "us": 1e-6,
        "µs": 1e-6,
        "μs": 1e-6,
        "ms": 1e-3,
        "s": 1.0,
        "m": 60.0,
        "h": 3600.0,
    }
    _PART = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> timedelta:
        """Parse ``value`` (already a ``timedelta`` for defaults)."""
        if isinstance(value, timedelta):
            return value
        text = str(value).strip()
        sign = -1.0 if text.startswith("-") else 1.0
        body = text[1:] if text.startswith(("+", "-")) else text
        if body == "0":
            return timedelta(0)
        seconds = 0.0
        position = 0
        for match in self._PART.finditer(body):
            if match.start() != position:
                break
            seconds += float(match.group(1)) * self._UNITS[match.group(2)]
            position = match.end()
        if not body or position != len(body):
            self.fail(f"{value!r} is not a duration (examples: 15s, 1m30s, 500ms)", param, ctx)
        return timedelta(seconds=sign * seconds)


class CommaSeparated(click.ParamType[tuple[str, ...]]):
    """A list written with commas and/or whitespace (upstream's CSV flags); empty items dropped."""

    name = "list"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> tuple[str, ...]:
        """Split ``value`` (already a tuple for defaults)."""
        if isinstance(value, tuple):
            return value
        return tuple(str(value).replace(",", " ").split())


_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def check_dns_label(value: str, *, field: str) -> None:
    """Require a Kubernetes DNS-1123 label (namespace names)."""
    if len(value) > 63 or not _DNS1123_LABEL.fullmatch(value):
        raise ConfigError(f'"{value}" is not a valid DNS-1123 label (lowercase a-z, 0-9, "-")', field=field)


def check_dns_subdomain(value: str, *, field: str) -> None:
    """Require a Kubernetes DNS-1123 subdomain (node and pod names)."""
    if len(value) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(value):
        raise ConfigError(
            f'"{value}" is not a valid DNS-1123 subdomain (lowercase a-z, 0-9, "-", ".")', field=field
        )


def check_absolute(path: Any, *, field: str) -> None:
    """Require an absolute filesystem path."""
    if not str(path).startswith("/"):
        raise ConfigError(f'"{path}" is not an absolute path', field=field)


def check_ip(value: str, *, field: str) -> None:
    """Require an IPv4 or IPv6 address."""
    try:
        ipaddress.ip_address(value)
    except ValueError:
        raise ConfigError(f'"{value}" is not an IP address', field=field) from None
