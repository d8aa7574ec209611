"""Standard Webhooks signing secrets and signatures (https://www.standardwebhooks.com/).

A secret is `whsec_<base64 of its key>`; a message's signature is `v1,<base64 HMAC-SHA256(key,
"{webhook-id}.{webhook-timestamp}.{body}")>`, and a message signed by several keys (a rotation's grace)
carries their signatures separated by spaces. The command line and the dashboard make secrets, the relay
signs with them.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Sequence

from outbox_bridge.core.sealing import Sealer

PREFIX = "whsec_"
KEY_BYTES = 32


def new_key() -> bytes:
    return secrets.token_bytes(KEY_BYTES)


def secret_text(key: bytes) -> str:
    """The secret as an endpoint's owner configures it: `whsec_<base64 of the key>`."""
    return PREFIX + base64.b64encode(key).decode("ascii")


def new_secret(sealer: Sealer) -> tuple[str, str]:
    """A new signing secret, as its owner configures it (`whsec_...`, shown once) and sealed for the store."""
    key = new_key()
    return secret_text(key), sealer.seal(key)


def signature(keys: Sequence[bytes], message_id: str, timestamp: int, body: bytes) -> str:
    """The `webhook-signature` header's value: one `v1,<base64>` per key, separated by spaces."""
    signed = f"{message_id}.{timestamp}.".encode() + body
    return " ".join(
        "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode("ascii")
        for key in keys
    )
