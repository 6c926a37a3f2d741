"""kipproducer's reference Kafka broker.

``storage`` holds the durable partition logs (segments, indexes, retention, compaction,
recovery) and ``producer_state`` the idempotent-producer bookkeeping. The server modules live
next to them. Keep this module free of imports so that importing one part of the broker does
not load the others.
"""
