"""Request handlers, one module per area; importing this package registers them all."""

from . import admin, cluster, fetch, groups, produce, security  # noqa: F401
