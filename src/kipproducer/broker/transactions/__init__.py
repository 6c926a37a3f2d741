"""The broker's transaction coordinator (KIP-98 / KIP-360 / KIP-447 / KIP-588, Kafka's TV1).

``TransactionCoordinator`` keeps every transactional id's state machine (state.py: states,
transitions, InitProducerId's epoch rules), stores each change durably before answering
(store.py) and ends transactions by writing markers to the partitions and completing group
offsets itself (coordinator.py, which also runs the timeout and expiry timer).
"""

from .coordinator import TransactionCoordinator
from .results import InitResult, TransactionDescription, TransactionListing
from .state import TransactionMetadata, TxnState
from .store import TransactionStore

__all__ = [
    "InitResult",
    "TransactionCoordinator",
    "TransactionDescription",
    "TransactionListing",
    "TransactionMetadata",
    "TransactionStore",
    "TxnState",
]
