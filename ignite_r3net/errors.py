"""One line for an error: how every failure reaches the user (``error: ...`` on stderr)."""

from __future__ import annotations

# PyTorch re-raises an exception from a DataLoader worker with this first line and the worker's
# traceback below; the cause a user can act on ("cannot read image X") is the traceback's last line.
_WORKER_WRAPPER = ("Caught ", "Original Traceback")


def error_line(e: BaseException, default: str | None = None) -> str:
    """The first line of ``e``'s message (the original one for a DataLoader worker's error);
    ``default`` (else the exception's type name) when the message is empty."""
    text = str(e).strip()
    if not text:
        return type(e).__name__ if default is None else default
    lines = text.splitlines()
    if lines[0].startswith(_WORKER_WRAPPER[0]) and _WORKER_WRAPPER[1] in text:
        _, sep, message = lines[-1].partition(": ")  # "package.module.DataError: message"
        return message.strip() if sep else lines[-1].strip()
    return lines[0]


def load_error_reason(e: BaseException) -> str:
    """Why ``torch.load(..., weights_only=True)`` refused a file, in words a user can act on."""
    text = str(e)
    if "global" in text.lower():  # "Unsupported global: ...", "unsupported GLOBAL ... is blocked"
        return "it contains pickled objects other than tensors (refused: it could run code)"
    if "Weights only load failed" in text or "central directory" in text or type(e).__name__ == "UnpicklingError":
        return "it is not a readable PyTorch file (corrupt, truncated, or another format)"
    return error_line(e)
