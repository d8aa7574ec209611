"""Webhook secrets and signatures: the Standard Webhooks signature of the specification's published test
vector, one signature per key during a rotation, and secrets sealed under AUTH_SECRET that open only under it
and show nothing of the key."""

from __future__ import annotations

import base64

import pytest

from outbox_bridge.core.sealing import SealBroken, Sealer
from outbox_bridge.core.signatures import new_key, secret_text, signature

# The Standard Webhooks specification's test vector (https://www.standardwebhooks.com/).
VECTOR_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
VECTOR_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
VECTOR_TIMESTAMP = 1614265330
VECTOR_BODY = b'{"test": 2432232314}'
VECTOR_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
AUTH_SECRET = "unit-test-secret-that-is-long-enough-for-hs256"


def vector_key() -> bytes:
    return base64.b64decode(VECTOR_SECRET.removeprefix("whsec_"))


def test_the_signature_of_the_specifications_test_vector() -> None:
    assert signature([vector_key()], VECTOR_ID, VECTOR_TIMESTAMP, VECTOR_BODY) == VECTOR_SIGNATURE


def test_two_keys_sign_twice_separated_by_a_space_the_current_key_first() -> None:
    other = bytes(32)
    both = signature([other, vector_key()], VECTOR_ID, VECTOR_TIMESTAMP, VECTOR_BODY).split(" ")
    assert both == [signature([other], VECTOR_ID, VECTOR_TIMESTAMP, VECTOR_BODY), VECTOR_SIGNATURE]


def test_a_secret_is_whsec_and_the_base64_of_a_new_32_byte_key() -> None:
    key = new_key()
    assert len(key) == 32 and key != new_key()
    assert base64.b64decode(secret_text(key).removeprefix("whsec_")) == key


def test_a_sealed_secret_opens_under_its_auth_secret_only() -> None:
    key = new_key()
    sealed = Sealer.of(AUTH_SECRET).seal(key)
    assert Sealer.of(AUTH_SECRET).open(sealed) == key
    with pytest.raises(SealBroken):
        Sealer.of(AUTH_SECRET + "-changed").open(sealed)


def test_a_sealed_secret_shows_nothing_of_the_key_and_differs_each_time() -> None:
    key = new_key()
    sealer = Sealer.of(AUTH_SECRET)
    first, second = sealer.seal(key), sealer.seal(key)
    assert first != second
    raw = base64.urlsafe_b64decode(first.removeprefix("v1."))
    assert key not in raw and base64.b64encode(key).decode() not in first


@pytest.mark.parametrize("where", [3, 20, 40, -2])
def test_an_altered_sealed_secret_does_not_open(where: int) -> None:
    sealed = Sealer.of(AUTH_SECRET).seal(new_key())
    raw = bytearray(base64.urlsafe_b64decode(sealed.removeprefix("v1.")))
    raw[where] ^= 1
    with pytest.raises(SealBroken):
        Sealer.of(AUTH_SECRET).open("v1." + base64.urlsafe_b64encode(bytes(raw)).decode())


@pytest.mark.parametrize("text", ["", "v1.", "v2." + "A" * 64, "v1.not base64!", "v1." + "A" * 8])
def test_what_is_not_a_sealed_secret_does_not_open(text: str) -> None:
    with pytest.raises(SealBroken):
        Sealer.of(AUTH_SECRET).open(text)
