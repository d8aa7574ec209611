"""Signing and checking result links (`api.links`): pure functions of the key, the link's parts and now."""

from __future__ import annotations

import base64
import re
from urllib.parse import parse_qs, urlsplit

import pytest

from outbox_bridge.api.links import LinkExpired, LinkInvalid, LinkSigner, derive_key, hkdf_sha256
from outbox_bridge.core.settings import Settings

SECRET = "a-secret-that-is-long-enough-for-hs256-tokens"
NOW = 1_700_000_000.25
JOB, TENANT, ATTEMPT = "job-1", "acme", "attempt-1"


@pytest.fixture
def signer() -> LinkSigner:
    return LinkSigner(derive_key(SECRET), 900)


def parts(url: str) -> tuple[str, str]:
    query = parse_qs(urlsplit(url).query)
    return query["expires"][0], query["sig"][0]


def test_a_link_names_the_result_path_a_whole_second_expiry_and_an_unpadded_base64url_signature(
    signer: LinkSigner,
) -> None:
    link = signer.link(JOB, TENANT, ATTEMPT, NOW)
    _, sig = parts(link.url)
    assert link.expires == 1_700_000_900
    assert link.url == f"/jobs/{JOB}/result?expires=1700000900&sig={sig}"
    assert re.fullmatch(r"[A-Za-z0-9_-]{43}", sig)
    assert len(base64.urlsafe_b64decode(sig + "=")) == 32


def test_a_link_opens_its_result_until_the_second_it_expires(signer: LinkSigner) -> None:
    link = signer.link(JOB, TENANT, ATTEMPT, NOW)
    expires, sig = parts(link.url)
    signer.check(JOB, TENANT, ATTEMPT, expires=expires, sig=sig, now=link.expires - 0.001)
    with pytest.raises(LinkExpired):
        signer.check(JOB, TENANT, ATTEMPT, expires=expires, sig=sig, now=link.expires)


@pytest.mark.parametrize(
    "part", ["job", "tenant", "attempt", "no attempt", "expires", "sig", "no sig", "no expires"]
)
def test_a_link_checked_against_any_other_part_is_invalid(signer: LinkSigner, part: str) -> None:
    expires, sig = parts(signer.link(JOB, TENANT, ATTEMPT, NOW).url)
    checked: dict[str, object] = {
        "job_id": JOB,
        "tenant": TENANT,
        "attempt_id": ATTEMPT,
        "expires": expires,
        "sig": sig,
    }
    checked.update(
        {
            "job": {"job_id": "job-2"},
            "tenant": {"tenant": "globex"},
            "attempt": {"attempt_id": "attempt-2"},
            "no attempt": {"attempt_id": None},
            "expires": {"expires": str(int(expires) + 1)},
            "sig": {"sig": sig[:-1] + ("A" if sig[-1] != "A" else "B")},
            "no sig": {"sig": None},
            "no expires": {"expires": None},
        }[part]
    )
    with pytest.raises(LinkInvalid):
        signer.check(now=NOW, **checked)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "expires", ["01700000900", "+1700000900", " 1700000900", "1700000900.0", "1e9", "", "0", "9" * 40]
)
def test_an_expiry_not_written_as_the_signer_writes_it_is_invalid(signer: LinkSigner, expires: str) -> None:
    _, sig = parts(signer.link(JOB, TENANT, ATTEMPT, NOW).url)
    with pytest.raises(LinkInvalid):
        signer.check(JOB, TENANT, ATTEMPT, expires=expires, sig=sig, now=NOW)


@pytest.mark.parametrize("sig", ["", "é" * 43, "\udcff", "A" * 10_000])
def test_a_signature_of_any_text_is_invalid_without_an_error(signer: LinkSigner, sig: str) -> None:
    with pytest.raises(LinkInvalid):
        signer.check(JOB, TENANT, ATTEMPT, expires="1700000900", sig=sig, now=NOW)


def test_an_altered_expiry_in_the_past_is_invalid_not_expired(signer: LinkSigner) -> None:
    _, sig = parts(signer.link(JOB, TENANT, ATTEMPT, NOW).url)
    with pytest.raises(LinkInvalid):
        signer.check(JOB, TENANT, ATTEMPT, expires="1600000000", sig=sig, now=NOW)


def test_parts_that_run_together_do_not_sign_the_same(signer: LinkSigner) -> None:
    joined = parts(signer.link("job-1", "acme", ATTEMPT, NOW).url)[1]
    shifted = parts(signer.link("job-1a", "cme", ATTEMPT, NOW).url)[1]
    assert joined != shifted


def test_the_link_key_is_derived_for_its_purpose_and_is_not_the_secret() -> None:
    key = derive_key(SECRET)
    assert len(key) == 32
    assert key != SECRET.encode() and SECRET.encode() not in key
    assert derive_key(SECRET + "x") != key
    other = LinkSigner(derive_key(SECRET + "x"), 900)
    expires, sig = parts(LinkSigner(key, 900).link(JOB, TENANT, ATTEMPT, NOW).url)
    with pytest.raises(LinkInvalid):
        other.check(JOB, TENANT, ATTEMPT, expires=expires, sig=sig, now=NOW)


@pytest.mark.parametrize(
    ("ikm", "salt", "info", "okm"),
    [
        # RFC 5869, A.1 and A.3: the first 32 bytes of their output.
        (
            b"\x0b" * 22,
            bytes(range(13)),
            bytes(range(0xF0, 0xFA)),
            "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf",
        ),
        (b"\x0b" * 22, b"", b"", "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d"),
    ],
)
def test_the_key_derivation_is_rfc_5869_hkdf(ikm: bytes, salt: bytes, info: bytes, okm: str) -> None:
    assert hkdf_sha256(ikm, salt=salt, info=info).hex() == okm


def test_the_signer_takes_its_lifetime_from_settings_and_never_shows_its_key() -> None:
    signer = LinkSigner.of(Settings(auth_secret=SECRET, result_link_seconds=60))
    assert signer.valid_seconds == 60
    assert signer.key.hex() not in repr(signer) and str(signer.key) not in repr(signer)


@pytest.mark.parametrize("seconds", [0, -1, 30 * 24 * 3600 + 1])
def test_a_link_lifetime_outside_one_second_to_thirty_days_is_refused(seconds: int) -> None:
    with pytest.raises(ValueError, match="result_link_seconds"):
        Settings(auth_secret=SECRET, result_link_seconds=seconds)


def test_the_api_server_keeps_no_access_log_which_would_write_down_link_signatures(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from outbox_bridge.api import app as api_app
    from outbox_bridge.api import server as api_server

    served: dict[str, object] = {}
    monkeypatch.setattr(api_app, "create_app", lambda settings, beat=False: "the app")
    monkeypatch.setattr(api_server.uvicorn, "run", lambda app, **options: served.update(options))
    api_server.serve(Settings(auth_secret=SECRET), host="127.0.0.1", port=0)
    assert served["access_log"] is False
