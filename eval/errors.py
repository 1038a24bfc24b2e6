"""The errors of `stepcritic eval`, apart from the modules that raise them, so that any stage of the evaluation
can report bad input without importing the runner. Stdlib only."""

from __future__ import annotations

from stepcritic.errors import UserError


class EvalError(UserError, RuntimeError):
    """Bad input or a failing judge; the message is one line meant for the person running the command."""


class FailedRequests(EvalError):
    """Some requests got no answer: nothing of them was cached, and the message says how to ask them again."""
