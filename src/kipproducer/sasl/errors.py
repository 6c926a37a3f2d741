"""Exceptions of SASL authentication, shared by the broker and the clients.

Each carries a message fit to show the other side: the broker sends it to the client in
SaslAuthenticate's error_message, a client raises it to its caller.
"""

from __future__ import annotations


class SecurityError(Exception):
    """Base of the security errors (the broker's store errors derive from it too)."""


class AuthenticationFailed(SecurityError):
    """Credentials were refused (SASL_AUTHENTICATION_FAILED), or the peer failed its proof."""


class MalformedToken(AuthenticationFailed):
    """A SASL token that does not parse as its mechanism's message."""
