"""Run at the start of every Python process the tests launch (brokers, workers, drivers, the
benchmark scripts, Spark's Python workers): tests/conftest.py puts this directory first on
their PYTHONPATH.

kio (the protocol schemas kipproducer builds on) imports hypothesis whenever it is importable,
to register test strategies for its types: about 0.5 s of CPU per process, and the test
environment has hypothesis installed. In these processes kio's import of it is refused (kio
then goes without the strategies); any other import of hypothesis, as a pytest run inside a
test makes, is left alone.
"""

import sys

_KIO_IMPORTER = "kio.static._phantom"


class _NoHypothesisForKio:
    """A meta path finder that refuses ``import hypothesis`` when kio asks for it."""

    def find_spec(self, name, path=None, target=None):
        if name == "hypothesis":
            frame = sys._getframe(1)
            while frame is not None:
                if frame.f_globals.get("__name__") == _KIO_IMPORTER:
                    raise ImportError("hypothesis is not loaded for kio in processes the "
                                      "tests launch (tests/child_startup/sitecustomize.py)")
                frame = frame.f_back
        return None


sys.meta_path.insert(0, _NoHypothesisForKio())
