"""The controller's writer retries authorization failures the client calls permanent (docs/errors.md §2)."""

from __future__ import annotations

from typing import Any

import pytest

from imexdra.common.errors import PermanentError, RetryableError
from imexdra.common.kube.client import PermanentApiError
from imexdra.common.kube.models.core_v1 import ConfigMap
from imexdra.common.kube.models.meta_v1 import ObjectMeta
from imexdra.common.machinery.store import Store
from imexdra.controller.overlay import Overlay
from imexdra.controller.writes import Writer


class Refusing:
    """A client whose every request the API server answers with ``code`` (the client's own error)."""

    def __init__(self, code: int) -> None:
        self.code = code

    async def request(self, method: str, path: str, **_: Any) -> Any:
        raise PermanentApiError(f"{method} {path}: {self.code} Refused: no", code=self.code, reason="Refused")


@pytest.mark.parametrize(("code", "retried"), [(401, True), (403, True), (404, False), (422, False)])
async def test_authorization_failures_are_retried_and_the_rest_stay_permanent(
    code: int, retried: bool
) -> None:
    """A 401/403 comes out of a write retryable with its code and message; a 404 or 422 stays permanent."""
    writer = Writer(Refusing(code))  # type: ignore[arg-type]  # only request() is called
    obj = ConfigMap(metadata=ObjectMeta(name="a", namespace="ns"))
    with pytest.raises(RetryableError if retried else PermanentError) as raised:
        await writer.create(obj, Overlay([Store[ConfigMap]()], lambda _: None))
    assert getattr(raised.value, "code", None) == code
    assert "Refused: no" in str(raised.value)
