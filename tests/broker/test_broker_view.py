"""The Broker is what its parts are typed against (broker/view.py: the handlers, listeners and
config descriptions see a BrokerView, so they need not import broker.py)."""

from __future__ import annotations

from kipproducer.broker.broker import Broker
from kipproducer.broker.view import BrokerView


def test_the_broker_has_every_member_of_its_view(tmp_path):
    broker = Broker(tmp_path)
    members = {name for name in vars(BrokerView) if not name.startswith("_")}
    members |= set(BrokerView.__annotations__)
    assert {"config", "logs", "advertised_for", "wait_for_data", "servers"} <= members
    assert not {name for name in members if not hasattr(broker, name)}
    assert isinstance(broker, BrokerView)
    assert not isinstance(object(), BrokerView)
