"""Exceptions of the security package; each carries a message fit to send to the client."""

from __future__ import annotations


class SecurityError(Exception):
    """Base of the package's errors."""


class AuthenticationFailed(SecurityError):
    """Credentials were refused (SASL_AUTHENTICATION_FAILED); the message goes to the client."""


class MalformedToken(AuthenticationFailed):
    """A SASL token that does not parse as its mechanism's message."""


class StoreError(SecurityError):
    """The users or ACL file is unreadable or corrupt."""
