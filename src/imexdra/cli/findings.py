"""What ``imexdra diagnose`` reports: findings, each a severity, a message and what to do about it."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Severity(StrEnum):
    """How much a finding matters; errors and warnings make ``diagnose`` exit 1."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


@dataclass(frozen=True, slots=True)
class Finding:
    """One observation about the domain, with what to do about it."""

    severity: Severity
    message: str
    hint: str = ""

    @property
    def is_problem(self) -> bool:
        """Errors and warnings are problems; info is context."""
        return self.severity is not Severity.INFO

    def to_json(self) -> dict[str, str]:
        """Stable JSON form."""
        return {"severity": str(self.severity), "message": self.message, "hint": self.hint}
