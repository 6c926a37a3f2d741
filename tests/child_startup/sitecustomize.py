"""Run at the start of every Python process the tests launch (brokers, workers, drivers, the
benchmark scripts, Spark's Python workers): tests/conftest.py puts this directory first on
their PYTHONPATH.

kio (the protocol schemas kipproducer builds on) imports hypothesis whenever it is importable,
to register test strategies for its types: about 0.5 s of CPU per process, and the test
environment has hypothesis installed. No launched process generates test data, so they are
started without it; the pytest processes themselves keep it.
"""

import sys

sys.modules.setdefault("hypothesis", None)  # so "import hypothesis" raises ImportError
