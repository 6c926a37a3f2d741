"""What the request handlers, the listeners and the config descriptions see of the broker.

broker.py's ``Broker`` is the one implementation. The handlers (through
``api.RequestContext``), the listeners (server.py) and broker_config_defs.py are typed against
this view, so none of them imports broker.py; broker.py imports them (importing the
``handlers`` package fills ``api.API_TABLE``), and the dependency runs one way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from .broker_config import BrokerConfig
    from .dynamic_config import DynamicConfigs
    from .groups import GroupCoordinator
    from .listeners import ListenerSpec
    from .security.broker_security import BrokerSecurity
    from .security.users import UserStore
    from .storage.log_manager import LogManager
    from .transactions import TransactionCoordinator


class ListenerView(Protocol):
    """One listener: the protocol it speaks and the address it is bound to."""

    @property
    def spec(self) -> ListenerSpec: ...
    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int: ...


@runtime_checkable
class BrokerView(Protocol):
    """The running broker, as its parts reach it."""

    data_dir: str
    #: the configuration in force (static properties with the dynamic levels laid over them)
    config: BrokerConfig
    #: the properties the broker was started with
    static_config: BrokerConfig
    dynamic: DynamicConfigs
    security: BrokerSecurity
    # None until start() has opened the data dir
    logs: LogManager | None
    groups: GroupCoordinator | None
    transactions: TransactionCoordinator | None

    @property
    def node_id(self) -> int: ...
    @property
    def users(self) -> UserStore: ...
    @property
    def server(self) -> ListenerView: ...
    @property
    def servers(self) -> Sequence[ListenerView]: ...

    def advertised_for(self, session: Any) -> tuple[str, int]: ...
    def advertised_address(self, server: Any) -> tuple[str, int]: ...
    def notify_appended(self) -> None: ...
    async def wait_for_data(self, timeout_s: float) -> None: ...
    def broker_synonym_levels(self) -> dict[str, list[tuple[str, int]]]: ...
    def apply_dynamic(self, per_broker: dict[str, str], default: dict[str, str],
                      validate_only: bool = False) -> None: ...
