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


class RetryLaterError(RetryableError):
    """Transient, but on the scale of an operator fixing something, not of one call's retries.

    The component reports it at once, so the user sees the cause, and leaves the retry to its caller's
    own schedule (the kubelet's next pod sync): e.g. the host's nvidia-imex not ready under
    HostManagedIMEX. Nothing is given up: the same request later may succeed.
    """


class ConfigError(PermanentError):
    """Invalid configuration: flags, env vars, feature gates, or an opaque device config.

    ``field`` names the offending field (dotted path) when one is known, so messages can point at it.
    """

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field


def decisive_error(error: BaseException) -> PermanentError | RetryableError | None:
    """The outermost ``PermanentError`` or ``RetryableError`` in ``error``'s chain (itself first).

    A retryable error raised while handling a permanent one (an API 403 the controller's writes or the
    plugin's prepare path retry, docs/errors.md §2) decides as retryable; foreign exceptions are
    skipped over.
    """
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, PermanentError | RetryableError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def is_permanent(error: BaseException) -> bool:
    """Whether the outermost of our errors in ``error``'s chain (``decisive_error``) is permanent."""
    return isinstance(decisive_error(error), PermanentError)
