"""``kip mirror`` and ``kipproducer.mirror.Mirror``: copy topics between two Kafka clusters.

Two modes (docs/mirror.md):

- ``preserve`` (KIP-391): every record lands at its source offset; the target's log ends are
  the resume point, so a restart never duplicates nor skips, with no state anywhere else;
- ``transactional`` (KIP-656): records and source offsets are committed in one target
  transaction, the offsets in a target group that no member consumes; a read_committed reader
  of the target sees every committed source record once.
"""

from .core import MODES, Mirror
from .topics import MirrorError

__all__ = ["MODES", "Mirror", "MirrorError"]
