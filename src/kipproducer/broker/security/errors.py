"""Exceptions of the security package; each carries a message fit to send to the client.

The authentication errors are shared with the clients (kipproducer.sasl.errors) and
re-exported here.
"""

from __future__ import annotations

from kipproducer.sasl.errors import AuthenticationFailed, MalformedToken, SecurityError

__all__ = ["AuthenticationFailed", "MalformedToken", "SecurityError", "StoreError"]


class StoreError(SecurityError):
    """The users or ACL file is unreadable or corrupt."""
