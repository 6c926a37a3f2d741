"""sasl.oauthbearer.method=oidc: the engine's client-credentials token client against a token
endpoint served here (unsecured JWTs, which `kip broker` validates), ACLs on the token's
principal, a refresh at 80% of a short lifetime, librdkafka's own OIDC client against the same
endpoint and broker as a peer check, and each endpoint failure as one error naming it."""

from __future__ import annotations

import base64
import json
import ssl
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs

import pytest
from confluent_kafka import KafkaError
from confluent_kafka import Producer as RdProducer
from tls_support import oauthbearer_broker_tls, rdkafka_ssl

from kipproducer import Producer
from kipproducer.broker.embedded import EmbeddedBroker
from kipproducer.broker.security import AclBinding
from kipproducer.engine.config import ConfigError, EngineConfig
from kipproducer.engine.oidc import OidcError, OidcSettings, fetch_token
from kipproducer.sasl.oauthbearer import UnsecuredConfig, unsecured_token

#: client id -> (client secret, the principal its tokens name)
CLIENTS = {"app-1": ("secret-1", "svc-writer"), "app-2": ("secret-2", "svc-other")}


@dataclass
class TokenEndpoint:
    """An OAuth 2.0 token endpoint on 127.0.0.1: client-credentials grant, basic auth,
    unsecured JWTs living ``life_s``; ``answer`` overrides the JSON answer (or an HTTP code)."""

    life_s: int = 3600
    answer: dict | str | int | None = None
    requests: list[dict] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}/oauth2/token"

    def respond(self, handler: BaseHTTPRequestHandler) -> None:
        body = handler.rfile.read(int(handler.headers.get("Content-Length") or 0)).decode()
        auth = handler.headers.get("Authorization", "")
        user, _, secret = (base64.b64decode(auth[len("Basic "):]).decode().partition(":")
                           if auth.startswith("Basic ") else ("", "", ""))
        self.requests.append({"client": user, "form": parse_qs(body), "body": body,
                              "content_type": handler.headers.get("Content-Type"),
                              "agent": handler.headers.get("User-Agent", "")})
        known = CLIENTS.get(user)
        if isinstance(self.answer, int) or known is None or known[0] != secret:
            code = self.answer if isinstance(self.answer, int) else 401
            self._send(handler, code, {"error": "invalid_client"})
        elif parse_qs(body).get("grant_type") != ["client_credentials"]:
            self._send(handler, 400, {"error": "unsupported_grant_type"})
        elif self.answer is not None:
            self._send(handler, 200, self.answer)
        else:
            token, _ = unsecured_token(UnsecuredConfig(known[1], self.life_s))
            self._send(handler, 200, {"access_token": token, "token_type": "bearer",
                                      "expires_in": self.life_s})

    @staticmethod
    def _send(handler: BaseHTTPRequestHandler, code: int, answer: dict | str) -> None:
        data = (answer if isinstance(answer, str) else json.dumps(answer)).encode()
        handler.send_response(code)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)


def serve(endpoint: TokenEndpoint) -> threading.Thread:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            endpoint.respond(self)

        def log_message(self, *args: object) -> None:
            pass

    endpoint.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=endpoint.server.serve_forever, daemon=True)
    thread.start()
    return thread


@pytest.fixture
def endpoint() -> Iterator[TokenEndpoint]:
    served = TokenEndpoint()
    thread = serve(served)
    yield served
    assert served.server is not None
    served.server.shutdown()
    served.server.server_close()
    thread.join(10)


@pytest.fixture(scope="module")
def broker(certs):
    with EmbeddedBroker(config=oauthbearer_broker_tls(certs)) as started:
        started.broker.acls.add([AclBinding.of("Topic", "*", "User:svc-writer", op, "Allow")
                                 for op in ("Write", "Describe", "Create")])
        yield started


def oidc_conf(broker, certs, endpoint: TokenEndpoint, client: str = "app-1", **extra) -> dict:
    return rdkafka_ssl(broker.listener_address("SASL_SSL"), certs, protocol="SASL_SSL", **{
        "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc",
        "sasl.oauthbearer.token.endpoint.url": endpoint.url,
        "sasl.oauthbearer.client.id": client,
        "sasl.oauthbearer.client.secret": CLIENTS.get(client, ("wrong",))[0], **extra})


def test_engine_produces_with_oidc_tokens_refreshed_at_80_percent(broker, certs, endpoint):
    """Tokens living 3 s: the engine asks the endpoint again before one expires, and records
    keep flowing past the first token's expiry; ACLs apply to the token's principal."""
    endpoint.life_s = 3
    topic = f"oidc-{uuid.uuid4().hex[:8]}"
    p = Producer(oidc_conf(broker, certs, endpoint, **{
        "sasl.oauthbearer.scope": "kafka produce", "linger.ms": 0,
        "sasl.oauthbearer.extensions": "traceId=abc,tenant=t1"}))
    errors: list = []
    sent = 0
    deadline = time.monotonic() + 4.5
    while time.monotonic() < deadline:
        assert p.produce_batch(topic, [{"value": b"r%d" % sent}], partition=0,
                               on_delivery=lambda e, m: errors.append(e)) == 1
        sent += 1
        assert p.flush(10) == 0
        time.sleep(0.1)
    assert len(errors) == sent and set(errors) == {None}
    tokens = p._engine.config.sasl.oauth
    assert tokens.fetches >= 2  # refreshed before the 3 s token expired
    token = tokens.current()
    assert token.principal == "svc-writer" and token.extensions == {"traceId": "abc",
                                                                    "tenant": "t1"}
    # The engine's requests (urllib's) and those of the Producer's librdkafka handle: the
    # same form (librdkafka leaves the space in the scope unescaped, the engine escapes it).
    engine = [r for r in endpoint.requests if r["agent"].startswith("Python-urllib")]
    assert len(engine) == tokens.fetches >= 2
    assert all(r["client"] == "app-1" and r["form"] == {"grant_type": ["client_credentials"],
                                                        "scope": ["kafka produce"]}
               and r["content_type"] == "application/x-www-form-urlencoded"
               for r in endpoint.requests), endpoint.requests
    other = Producer(oidc_conf(broker, certs, endpoint, "app-2", **{
        "linger.ms": 0, "delivery.timeout.ms": 60000}))
    denied: list = []
    other.produce_arrays(topic, [b"x"], partition=0, on_delivery=lambda e, r: denied.append(e))
    other.flush(10)
    assert [e.code() for e in denied] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]


def test_librdkafka_oidc_against_the_same_endpoint_and_broker(broker, certs, endpoint):
    """Peer check: librdkafka's own OIDC client (http:// endpoint, unsigned token) gets a
    token from the endpoint and the broker accepts it."""
    topic = f"oidc-rd-{uuid.uuid4().hex[:8]}"
    rd = RdProducer(oidc_conf(broker, certs, endpoint, **{"sasl.oauthbearer.scope": "kafka"}))
    rd.produce(topic, b"librdkafka", partition=0)
    assert rd.flush(20) == 0
    theirs = [r for r in endpoint.requests if r["client"] == "app-1"]
    assert theirs and theirs[0]["form"] == {"grant_type": ["client_credentials"],
                                            "scope": ["kafka"]}


def failed_record(conf: dict) -> tuple[KafkaError, float]:
    p = Producer({**conf, "delivery.timeout.ms": 60000, "log_level": 0})
    errors: list = []
    started = time.monotonic()
    p.produce_arrays("t", [b"x"], partition=0, on_delivery=lambda e, r: errors.append(e))
    p.flush(15)
    assert len(errors) == 1 and errors[0] is not None, errors
    return errors[0], time.monotonic() - started


def test_endpoint_refusals_fail_the_records_at_once(broker, certs, endpoint):
    err, took = failed_record(oidc_conf(broker, certs, endpoint, "app-unknown"))
    assert err.code() == KafkaError._AUTHENTICATION and took < 5
    assert endpoint.url in err.str() and "HTTP 401" in err.str(), err.str()
    assert "sasl.oauthbearer.client.secret" in err.str()
    closed = TokenEndpoint()
    serve(closed)
    assert closed.server is not None
    url = closed.url
    closed.server.shutdown()
    closed.server.server_close()  # nothing listens there any more
    conf = {**oidc_conf(broker, certs, endpoint), "sasl.oauthbearer.token.endpoint.url": url}
    err, took = failed_record(conf)
    assert err.code() == KafkaError._AUTHENTICATION and took < 5
    assert url in err.str() and "cannot be reached" in err.str(), err.str()


def unsigned_jwt(claims: dict) -> str:
    def part(value: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'none'})}.{part(claims)}."


@pytest.mark.parametrize("answer,expected", [
    ({"token_type": "bearer"}, "without an \"access_token\" string"),
    ({"access_token": "not-a-jwt"}, "is not a JWT"),
    ({"access_token": "a.%%%.b"}, "payload is not base64url JSON"),
    ({"access_token": unsigned_jwt({"sub": "x"})}, "no valid \"exp\" claim"),
    ("<html>login</html>", "not JSON"),
    (503, "HTTP 503"),
])
def test_unusable_answers_name_the_endpoint_and_the_cause(endpoint, answer, expected):
    endpoint.answer = answer
    settings = OidcSettings(endpoint.url, "app-1", "secret-1")
    with pytest.raises(OidcError, match=expected) as caught:
        fetch_token(settings)
    assert endpoint.url in str(caught.value) and "sasl.oauthbearer.token.endpoint.url" in str(
        caught.value)


def test_an_https_endpoint_is_checked_against_https_ca_location(certs):
    """https:// endpoints: the CA of https.ca.location (or https.ca.pem) must sign the
    endpoint's certificate; another CA is refused, naming the endpoint."""
    served = TokenEndpoint()
    thread = serve(served)
    assert served.server is not None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certs.server)
    served.server.socket = context.wrap_socket(served.server.socket, server_side=True)
    url = served.url.replace("http://", "https://")
    try:
        token = fetch_token(OidcSettings(url, "app-1", "secret-1",
                                         https_ca_location=str(certs.ca)))
        assert token.principal == "svc-writer"
        token = fetch_token(OidcSettings(url, "app-1", "secret-1",
                                         https_ca_pem=certs.ca.read_text()))
        assert token.principal == "svc-writer"
        with pytest.raises(OidcError, match="cannot be reached: .*certificate verify failed"):
            fetch_token(OidcSettings(url, "app-1", "secret-1",
                                     https_ca_location=str(certs.other_ca)))
    finally:
        served.server.shutdown()
        served.server.server_close()
        thread.join(10)


def test_a_token_without_the_principal_claim(endpoint):
    settings = OidcSettings(endpoint.url, "app-1", "secret-1", sub_claim="azp")
    with pytest.raises(OidcError, match="no non-empty \"azp\" claim"):
        fetch_token(settings)


def test_bad_oidc_settings_name_the_property(endpoint):
    base = {"bootstrap.servers": "127.0.0.1:9", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc",
            "sasl.oauthbearer.token.endpoint.url": endpoint.url,
            "sasl.oauthbearer.client.id": "app-1",
            "sasl.oauthbearer.client.secret": "secret-1"}
    for missing in ("sasl.oauthbearer.token.endpoint.url", "sasl.oauthbearer.client.secret"):
        conf = {k: v for k, v in base.items() if k != missing}
        with pytest.raises(ConfigError, match=f"{missing} is mandatory when "
                                              "sasl.oauthbearer.method=oidc"):
            EngineConfig.from_properties(conf)
    for name, value, expected in (
            ("sasl.oauthbearer.token.endpoint.url", "ftp://idp/token", "expected an http"),
            ("sasl.oauthbearer.extensions", "trace-id=1", "must be letters only"),
            ("sasl.oauthbearer.grant.type", "urn:ietf:params:oauth:grant-type:jwt-bearer",
             "client_credentials grant only"),
            ("enable.sasl.oauthbearer.unsecure.jwt", "true", "mutually exclusive")):
        with pytest.raises(ConfigError, match=expected):
            EngineConfig.from_properties({**base, name: value})
    # librdkafka's alias names the same setting
    aliased = {k: v for k, v in base.items() if k != "sasl.oauthbearer.client.id"}
    aliased["sasl.oauthbearer.client.credentials.client.id"] = "app-1"
    sasl = EngineConfig.from_properties(aliased).sasl
    assert sasl is not None and sasl.oauth is not None
    assert sasl.oauth.current().principal == "svc-writer"
