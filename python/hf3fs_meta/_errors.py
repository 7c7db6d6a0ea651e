"""The exceptions of hf3fs_meta. The binding raises them; their fields are the C++ SDK's Error."""

from __future__ import annotations

from typing import Optional


class MetadataError(RuntimeError):
    """A call failed: refused before sending, refused by the server, or no usable answer came.

    A RuntimeError, so code written for vLLM's client (which raises RuntimeError, and whose
    connector catches Exception) keeps working. ``str()`` is a sentence a person can act on.

    Attributes:
        code: the error code's stable name, e.g. ``"rank_not_initialized"``, ``"unavailable"``.
        operation: the call: ``initialize``, ``allocate``, ``confirm_write``, ``batch_exists``,
            ``get_locations``, ``clear``, ``delete_keys``, ``stats``, ``drop_rank``, ``namespaces``,
            ``drop_namespace``, ``key_status`` or ``raw``.
        status: the HTTP status, or None when no answer came.
        detail: the server's detail as sent (or the transport's or client's message).
        cause: the parsed cause, e.g. ``"Rank 3 not initialized"``.
        rank: the rank the cause names, or None.
        sent: whether the request may have reached the server.
        attempts: the attempts the call made.
        reinitialized: whether the call initialized the rank again (the server had forgotten it).
        request_id: the call's X-Request-Id.
        stop_reason: why the retry loop stopped, when it retried or refused to.
    """

    def __init__(self, message: str, *, code: str, operation: str = "raw", status: Optional[int] = None,
                 detail: str = "", cause: str = "", rank: Optional[int] = None, sent: bool = False,
                 attempts: int = 0, reinitialized: bool = False, request_id: str = "",
                 stop_reason: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.operation = operation
        self.status = status
        self.detail = detail
        self.cause = cause
        self.rank = rank
        self.sent = sent
        self.attempts = attempts
        self.reinitialized = reinitialized
        self.request_id = request_id
        self.stop_reason = stop_reason


class InvalidArgumentError(MetadataError, ValueError):
    """Refused before anything was sent (code ``"invalid_argument"``): an empty or duplicate key, a
    page named twice, a negative page, a worker ``num_pages <= 0``. Also a ValueError."""
