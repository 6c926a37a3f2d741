"""kipproducer's sending engine: accumulator, sender thread, connections, metadata.

``kipproducer.Producer`` uses it for its bulk lane; see engine.py for the design and
docs/producer.md for the configuration it reads.
"""
