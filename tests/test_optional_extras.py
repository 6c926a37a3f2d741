"""The package without its optional extras: kipproducer.spark refuses with an ImportError that
names the extra, and every other module imports (as documentation tools import them all).

Each check runs in a subprocess whose sys.meta_path refuses ``pyspark``, so it holds whether
or not pyspark is installed here."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

BLOCK_PYSPARK = textwrap.dedent("""
    import sys

    class NoPyspark:
        def find_spec(self, name, path=None, target=None):
            if name == "pyspark" or name.startswith("pyspark."):
                raise ImportError(f"No module named {name!r} (blocked by the test)", name=name)
            return None

    sys.meta_path.insert(0, NoPyspark())
""")


def _run(code: str) -> dict:
    run = subprocess.run([sys.executable, "-c", BLOCK_PYSPARK + textwrap.dedent(code)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_spark_without_pyspark_is_an_import_error_naming_the_extra():
    out = _run("""
        import json
        try:
            import kipproducer.spark
        except ImportError as exc:
            print(json.dumps({"type": type(exc).__name__, "message": str(exc),
                              "name": exc.name}))
        except Exception as exc:
            print(json.dumps({"type": type(exc).__name__, "message": str(exc)}))
        else:
            print(json.dumps({"type": None}))
    """)
    assert out["type"] == "ImportError", out
    assert 'pip install "kipproducer[spark]"' in out["message"]
    assert out["name"] == "kipproducer.spark"


def test_every_module_imports_or_refuses_with_import_error_without_extras():
    out = _run("""
        import importlib, json, pkgutil
        import kipproducer

        walk_errors, imported, refused, broken = [], [], {}, {}
        for info in pkgutil.walk_packages(kipproducer.__path__, "kipproducer.",
                                          onerror=walk_errors.append):
            try:
                importlib.import_module(info.name)
            except ImportError as exc:
                refused[info.name] = str(exc)
            except BaseException as exc:
                broken[info.name] = f"{type(exc).__name__}: {exc}"
            else:
                imported.append(info.name)
        print(json.dumps({"walk_errors": walk_errors, "imported": imported,
                          "refused": refused, "broken": broken}))
    """)
    assert out["broken"] == {}, out["broken"]
    # only the spark package (and its modules, through it) refuses, and it names the extra
    assert out["refused"], out
    for name, message in out["refused"].items():
        assert name.startswith("kipproducer.spark"), (name, message)
        assert 'pip install "kipproducer[spark]"' in message, (name, message)
    for name in ("kipproducer.producer", "kipproducer.engine.engine",
                 "kipproducer.engine.transactions", "kipproducer._accumulator",
                 "kipproducer._records", "kipproducer.mirror", "kipproducer.__main__"):
        assert name in out["imported"], name
    assert "kipproducer.spark" in out["walk_errors"]


def test_demo_and_mirror_cli_say_how_to_install_spark_without_pyspark():
    out = _run("""
        import contextlib, io, json
        from types import SimpleNamespace
        from kipproducer import demo, mirror_cli

        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            step = demo._spark_step(target=None)
        err = io.StringIO()
        args = SimpleNamespace(engine="spark", verbose=False)
        with contextlib.redirect_stderr(err):
            code = mirror_cli.cmd_mirror(args)
        print(json.dumps({"step": step, "demo": printed.getvalue(), "code": code,
                          "mirror": err.getvalue()}))
    """)
    assert out["step"] is None
    assert "5. spark   skipped: pyspark is not installed" in out["demo"]
    assert 'pip install "kipproducer[spark]"' in out["demo"]
    assert out["code"] == 2
    assert out["mirror"].startswith("kip mirror: --engine spark: pyspark is not installed")
    assert 'pip install "kipproducer[spark]"' in out["mirror"]
