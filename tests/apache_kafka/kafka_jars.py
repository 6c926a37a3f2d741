"""Apache Kafka's jars, fetched once per machine from Maven Central into a cache outside the
repository, for the tests and benchmarks that run a real Apache Kafka.

The pinned release is ``KAFKA_VERSION``, the one place that names it: the newest 4.x whose
broker (``kafka_2.13``), tools (``kafka-tools``) and MirrorMaker 2 (``connect-mirror``) all
resolve with their dependencies (4.4.0's broker resolves but its ``connect-mirror`` does not).
Maven copies the runtime classpath of the three into ``<cache>/kafka-<version>/lib``, plus a
log4j2 binding for slf4j (the broker's POM has log4j2 but no binding, so it would log
nothing). The cache is ``$KIP_KAFKA_CACHE`` or ``~/.cache/kipproducer``.

    python tests/apache_kafka/kafka_jars.py          # fetch (once), print the lib folder

``.ci/run`` runs that before the test command. Without ``java`` or ``mvn`` on the machine
:func:`missing` names what is missing; the tests then skip, except under ``CI=true``, where
they fail (tests/apache_kafka/conftest.py).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

KAFKA_VERSION = "4.3.1"
# log4j-slf4j-impl at the log4j2 version kafka_2.13 4.3.1 depends on (log4j-api/-core 2.25.4)
LOG4J_VERSION = "2.25.4"
ARTIFACTS = (
    ("org.apache.kafka", "kafka_2.13", KAFKA_VERSION),
    ("org.apache.kafka", "kafka-tools", KAFKA_VERSION),
    ("org.apache.kafka", "connect-mirror", KAFKA_VERSION),
    ("org.apache.logging.log4j", "log4j-slf4j-impl", LOG4J_VERSION),
)
FETCH_TIMEOUT_S = 900


def cache_root() -> Path:
    return Path(os.environ.get("KIP_KAFKA_CACHE") or Path.home() / ".cache" / "kipproducer")


def lib_dir() -> Path:
    return cache_root() / f"kafka-{KAFKA_VERSION}" / "lib"


def java() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    return shutil.which("java")


def javac() -> str | None:
    java_path = java()
    if java_path is not None and (Path(java_path).parent / "javac").exists():
        return str(Path(java_path).parent / "javac")
    return shutil.which("javac")


def missing() -> str | None:
    """None when Apache Kafka can run here (its jars cached, or Maven to fetch them, and a
    JDK to build the tests' Java reader), else one line naming what is missing."""
    if java() is None:
        return "no Java (java on PATH or JAVA_HOME; Debian: openjdk-17-jdk-headless)"
    if javac() is None:
        return "no Java compiler (javac; a JDK, Debian: openjdk-17-jdk-headless)"
    if not complete(lib_dir()) and shutil.which("mvn") is None:
        return (f"Apache Kafka {KAFKA_VERSION}'s jars are not cached in {lib_dir()} and there "
                "is no Maven (mvn) to fetch them (Debian: maven)")
    return None


def require_in_tests() -> None:
    """In a test that needs Apache Kafka: skip it naming what is missing, or under
    ``CI=true`` fail it, so CI cannot pass by skipping."""
    require(missing(), "Apache Kafka")


def require(reason: str | None, what: str) -> None:
    """In a test that needs ``what``: nothing when ``reason`` is None, else skip naming the
    reason, or under ``CI=true`` fail, so CI cannot pass by skipping."""
    import pytest

    if reason is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"{what} is required in CI: {reason}", pytrace=False)
    pytest.skip(f"{what} tests need {reason}")


def complete(lib: Path) -> bool:
    """Has :func:`maven_copy` finished filling ``lib``?"""
    return (lib / ".complete").exists()


def _pom(artifacts: tuple[tuple[str, str, str], ...]) -> str:
    deps = "\n".join(
        f"    <dependency><groupId>{g}</groupId><artifactId>{a}</artifactId>"
        f"<version>{v}</version></dependency>" for g, a, v in artifacts)
    return f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>kipproducer.tests</groupId><artifactId>cached-classpath</artifactId>
  <version>1</version><packaging>pom</packaging>
  <dependencies>
{deps}
  </dependencies>
</project>
"""


def maven_copy(artifacts: tuple[tuple[str, str, str], ...], lib: Path, what: str) -> Path:
    """``lib`` holding the runtime classpath of ``artifacts`` (group, artifact, version),
    copied by Maven the first time. A fetch that fails leaves no half-filled folder behind (it
    copies into a sibling, then renames). ``what`` names them in the error."""
    if complete(lib):
        return lib
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError(f"{what}'s jars are not cached in {lib} and there is no Maven "
                           "(mvn) to fetch them (Debian: maven)")
    lib.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=lib.parent, prefix="fetch-") as work:
        staged = Path(work) / "lib"
        (Path(work) / "pom.xml").write_text(_pom(artifacts))
        proc = subprocess.run(
            [mvn, "-q", "-B", "dependency:copy-dependencies", "-DincludeScope=runtime",
             f"-DoutputDirectory={staged}"],
            cwd=work, capture_output=True, text=True, timeout=FETCH_TIMEOUT_S)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
            raise RuntimeError(f"Maven could not fetch {what}:\n{tail}")
        (staged / ".complete").write_text(what + "\n")
        if lib.exists():
            shutil.rmtree(lib)
        staged.rename(lib)
    return lib


def fetch() -> Path:
    """The lib folder with every jar of Apache Kafka, fetched through Maven the first
    time."""
    return maven_copy(ARTIFACTS, lib_dir(), f"Apache Kafka {KAFKA_VERSION}")


def classpath() -> str:
    return str(fetch() / "*")


JAVA_DIR = Path(__file__).with_name("java")
READER_SOURCE = JAVA_DIR / "ReadTopics.java"


def reader_classpath() -> str:
    """Kafka's classpath plus the tests' Java reader (java/ReadTopics.java)."""
    return compiled_classpath(READER_SOURCE)


def compiled_classpath(source_path: Path) -> str:
    """Kafka's classpath plus one Java source file (a class of the same name, no package)
    compiled against it, once per source version, into the cache (the tests' reader, the
    benchmarks' Java producer)."""
    source = source_path.read_bytes()
    name = source_path.stem
    out = lib_dir().parent / f"{name.lower()}-{hashlib.sha256(source).hexdigest()[:12]}"
    if not (out / f"{name}.class").exists():
        staged = Path(tempfile.mkdtemp(dir=lib_dir().parent, prefix=f"{name.lower()}-"))
        proc = subprocess.run([javac() or "javac", "-cp", classpath(), "-d", str(staged),
                               str(source_path)], capture_output=True, text=True,
                              timeout=300)
        if proc.returncode != 0:
            raise RuntimeError(f"javac failed on {source_path.name}:\n{proc.stderr}")
        if out.exists():
            shutil.rmtree(staged)
        else:
            staged.rename(out)
    return f"{classpath()}{os.pathsep}{out}"


if __name__ == "__main__":
    reason = missing()
    if reason is not None:
        sys.exit(f"cannot fetch Apache Kafka: {reason}")
    print(fetch())
