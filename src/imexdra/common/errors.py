"""The project's error tree: every failure a component reports is one of these.

The split is the permanent-vs-retryable contract of docs/errors.md (what each component does with it): a
``PermanentError`` stops retries and its message is surfaced to the user (e.g. as a pod event through
the kubelet); a ``RetryableError`` is retried with backoff until a deadline. Library exceptions are
wrapped at the edge with ``raise ... from`` so callers only ever branch on these types.
"""

from __future__ import annotations


class DriverError(Exception):
    """Base of every error this project raises on purpose."""


class PermanentError(DriverError):
    """Retrying cannot help: bad user input, unsupported mode, missing hardware capability."""


class RetryableError(DriverError):
    """A transient condition: API conflicts or 5xx, lock timeouts, a peer that is not ready yet."""


class ConfigError(PermanentError):
    """Invalid configuration: flags, env vars, feature gates, or an opaque device config.

    ``field`` names the offending field (dotted path) when one is known, so messages can point at it.
    """

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field


def is_permanent(error: BaseException) -> bool:
    """Tell whether ``error`` or anything in its cause chain is permanent."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, PermanentError):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False
