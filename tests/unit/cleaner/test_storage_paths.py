"""Rule 4 on HDFS and S3 locations: bucket and NameNode containment, no traversal however spelled."""

from __future__ import annotations

import pytest

from acidclean.consumers.rules.paths import TenantRoots, storage_path
from acidclean.shared.errors import UnsafePathError

pytestmark = pytest.mark.rule4

ROOTS = TenantRoots.build(
    "acme",
    {
        "acme": ["s3a://lake/warehouse/acme", "hdfs://nn:8020/warehouse/acme"],
        "globex": ["s3a://lake/warehouse/acme/globex", "s3a://globex-bucket/warehouse"],
    },
)


def refusal_of(uri: str) -> str | None:
    path = storage_path(uri)
    refusal = ROOTS.check(path, path)
    return None if refusal is None else refusal.code


@pytest.mark.parametrize(
    "uri",
    [
        "s3a://lake/warehouse/acme/sales.db/orders",
        "s3://lake/warehouse/acme/sales.db/orders",  # s3 and s3a are one scheme
        "s3a://LAKE/warehouse/acme/sales.db/orders",  # bucket names compare without case, as DNS does
        "hdfs://nn:8020/warehouse/acme/sales.db/orders/city=St. John%27s%232",
        "hdfs://nn:8020/warehouse/acme/sales.db/orders/city=a%2Fb",  # Hive's escaped '/'
    ],
)
def test_a_location_under_the_tenants_root_is_accepted(uri: str) -> None:
    assert refusal_of(uri) is None


@pytest.mark.parametrize(
    ("uri", "code"),
    [
        ("s3a://other-bucket/warehouse/acme/sales.db/orders", "unsafe_path"),  # same prefix, another bucket
        ("s3a://lake/warehouse/acmecorp/sales.db/orders", "unsafe_path"),  # a sibling sharing the name prefix
        ("s3a://lake/warehouse/acme", "unsafe_path"),  # the root itself is no table
        ("hdfs://nn2:8020/warehouse/acme/sales.db/orders", "unsafe_path"),  # another NameNode
        ("hdfs://nn:9000/warehouse/acme/sales.db/orders", "unsafe_path"),  # another port
        ("s3a://lake/warehouse/acme/globex/sales.db/orders", "other_tenant"),  # another tenant's narrower root
        ("s3a://globex-bucket/warehouse/sales.db/orders", "other_tenant"),
    ],
)
def test_a_location_outside_the_tenants_roots_is_refused(uri: str, code: str) -> None:
    assert refusal_of(uri) == code


@pytest.mark.parametrize(
    "uri",
    [
        "s3a://lake/warehouse/acme/../globex-data/t",
        "s3a://lake/warehouse/acme/%2e%2e/globex-data/t",  # encoded traversal
        "s3a://lake/warehouse/acme/%2E%2E/t",
        "hdfs://nn:8020/warehouse/acme/.%2e/t",
        "s3a://lake/warehouse/acme/./sales.db/t",  # S3 keys are literal: '.' is refused, not normalised
        "s3a://lake/warehouse/acme//sales.db/t",  # an empty key segment
        "hdfs://nn:8020/warehouse/acme/sales.db//t",
        "s3a://lake/warehouse/acme/sales.db/t\x00",
    ],
)
def test_traversal_however_spelled_is_refused_before_any_comparison(uri: str) -> None:
    with pytest.raises(UnsafePathError):
        storage_path(uri)
