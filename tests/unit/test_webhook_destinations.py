"""Which destinations a completion webhook may reach: public addresses only, unless the deployment allows
private targets. Every disguised spelling of a private address is read as the resolver reads it, and an
endpoint's URL is refused at registration with one line naming the rule."""

from __future__ import annotations

import pytest

from outbox_bridge.core import destinations
from outbox_bridge.jobstore.webhook_deliveries import Attempted
from outbox_bridge.jobstore.webhooks import InvalidEndpoint, check_target

ALLOW = "set WEBHOOK_ALLOW_PRIVATE=1 to allow private targets"


@pytest.mark.parametrize(
    ("address", "rule"),
    [
        ("127.0.0.1", "a loopback"),
        ("127.255.0.9", "a loopback"),
        ("::1", "a loopback"),
        ("::ffff:127.0.0.1", "a loopback"),
        ("0.0.0.0", "an unspecified"),
        ("::", "an unspecified"),
        ("169.254.169.254", "a link-local"),
        ("fe80::1%eth0", "a link-local"),
        ("10.1.2.3", "a private"),
        ("172.16.0.1", "a private"),
        ("192.168.0.10", "a private"),
        ("fc00::1", "a private"),
        ("fd12:3456::1", "a private"),
        ("::ffff:10.0.0.1", "a private"),
        ("224.0.0.1", "a multicast"),
        ("100.64.0.1", "not a public"),
    ],
)
def test_a_non_public_address_is_refused_naming_its_rule(address: str, rule: str) -> None:
    assert destinations.refusal(address) == f"refused: {address} is {rule} address; {ALLOW}"


@pytest.mark.parametrize("address", ["93.184.216.34", "8.8.8.8", "2606:4700:4700::1111"])
def test_a_public_address_is_allowed(address: str) -> None:
    assert destinations.refusal(address) is None


@pytest.mark.parametrize(
    ("url", "loopback"),
    [
        ("http://127.0.0.1/hook", "127.0.0.1"),
        ("http://2130706433/", "127.0.0.1"),
        ("http://0x7f000001/", "127.0.0.1"),
        ("http://0177.0.0.1/", "127.0.0.1"),
        ("http://127.1:8080/", "127.0.0.1"),
        ("http://[::ffff:127.0.0.1]/", "::ffff:127.0.0.1"),
        ("https://[::1]:8443/hook", "::1"),
        ("http://localhost/", None),
    ],
)
def test_every_spelling_of_a_loopback_address_is_refused_at_registration(
    url: str, loopback: str | None
) -> None:
    with pytest.raises(InvalidEndpoint) as refused:
        check_target(url, allow_private=False)
    said = str(refused.value)
    assert said.startswith("refused: ") and said.endswith(ALLOW) and "\n" not in said
    assert "loopback" in said and (loopback is None or f" {loopback} " in said)


@pytest.mark.parametrize(
    ("url", "rule"),
    [
        ("http://0.0.0.0/", "unspecified"),
        ("http://[::]/", "unspecified"),
        ("http://169.254.169.254/latest/meta-data/", "link-local"),
        ("http://10.0.0.8/", "private"),
        ("https://192.168.1.1:8443/", "private"),
        ("http://[fd00::5]/", "private"),
    ],
)
def test_private_link_local_and_unspecified_urls_are_refused_at_registration(url: str, rule: str) -> None:
    with pytest.raises(InvalidEndpoint, match=f"is an? {rule} address"):
        check_target(url, allow_private=False)


def test_a_name_that_resolves_to_a_private_address_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(destinations, "resolve", lambda host, port: ["93.184.216.34", "10.0.0.7"])
    with pytest.raises(InvalidEndpoint, match=r"^refused: 10\.0\.0\.7 is a private address"):
        check_target("https://hooks.example.com/in", allow_private=False)


def test_a_name_that_resolves_only_to_public_addresses_is_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(destinations, "resolve", lambda host, port: ["93.184.216.34"])
    assert check_target("https://hooks.example.com/in", allow_private=False) == "https://hooks.example.com/in"


def test_allowing_private_targets_accepts_them() -> None:
    for url in ("http://127.0.0.1:8080/x", "http://[::1]/", "http://10.0.0.8/", "http://2130706433/"):
        assert check_target(url, allow_private=True) == url


def test_a_url_the_http_client_cannot_send_to_is_refused_even_when_private_targets_are_allowed() -> None:
    with pytest.raises(InvalidEndpoint, match="cannot be sent to"):
        check_target("http://0177.0.0.1/", allow_private=True)


def test_a_2xx_whose_answer_did_not_end_in_time_does_not_deliver() -> None:
    cut = Attempted(at=0.0, status_code=200, latency_ms=1000.0, error="no whole answer within 1 s")
    assert not cut.delivered
    assert Attempted(at=0.0, status_code=204, latency_ms=1.0).delivered
