"""KIP-391 offsets and KIP-27 conditional publish on a stock cluster, through Kafka's own
transactions (docs/stock-clusters.md).

* :mod:`.plan`: how a partition's asked offsets become plain runs, aborted fillers and empty
  aborted transactions (pure logic).
* :mod:`.probe`: the capability probe: transactions, and aborted records hidden at
  read_committed while another producer's records inside the aborted range are not.
* :mod:`.log_ends`: a partition's log end and last stable offset, as a reader sees them.
* :mod:`.rows`: a call's records as columns, and where their reports go.
* :mod:`.emulation`: the writer the Producer hands emulated calls to.
* :mod:`.txn_keys`: key conditions inside the Producer's own transaction.
"""

from .probe import EmulationUnsupported, probe_cluster

__all__ = ["EmulationUnsupported", "probe_cluster"]
