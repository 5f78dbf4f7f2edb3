"""The local Kafka's cluster id must never read as a command-line option."""

from __future__ import annotations

import uuid
from unittest import mock

from acidclean.deploy.local.kafka import new_cluster_id


def test_a_cluster_id_never_starts_with_a_dash() -> None:
    # 0xf8 as the first byte encodes to '-' in URL-safe base64: the first draw must be rejected.
    dashed = uuid.UUID(bytes=b"\xf8" + bytes(15))
    with mock.patch("acidclean.deploy.local.kafka.uuid.uuid4", side_effect=[dashed, uuid.UUID(int=1)]):
        cluster_id = new_cluster_id()
    assert not cluster_id.startswith("-") and len(cluster_id) == 22


def test_cluster_ids_are_url_safe_base64_of_16_bytes() -> None:
    ids = {new_cluster_id() for _ in range(2000)}
    assert len(ids) == 2000 and not any(i.startswith("-") for i in ids)
