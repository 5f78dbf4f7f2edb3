"""Issue 54 on a real S3 API server (moto, started here alone on 127.0.0.1): in a versioned bucket a
cleanup deletes and its ledger records each file's version, which ``undo`` copies back; in an
unversioned bucket with a trash root the files are copied there and deleted, and ``undo`` moves them
back; an expired version is refused by name; nothing is ever overwritten.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import boto3
import pytest

from acidclean.consumers.ledger import Ledger
from acidclean.consumers.remover import CheckedCleanup, PlannedRemoval, Removal, checked_directory, remove_all
from acidclean.consumers.undo import apply_undo, plan_undo
from acidclean.deploy.local.process import stop_process
from acidclean.deploy.local.s3 import S3Endpoint, start_s3
from acidclean.shared.metastore import TableIdentity, TableInfo
from acidclean.shared.storage import StorageLocation, open_location
from acidclean.shared.storage.trash import TrashPolicy, disposal_for

pytestmark = pytest.mark.integration
NOW = datetime(2026, 12, 2, 6, 30, tzinfo=timezone.utc)
D1, D2 = "delta_0000001_0000001_0000", "delta_0000002_0000002_0000"


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Endpoint]:
    process, endpoint = start_s3(tmp_path_factory.mktemp("s3-trash"))
    environment = pytest.MonkeyPatch()
    try:
        for name, value in endpoint.environment().items():
            environment.setenv(name, value)
        environment.setenv("NO_PROXY", "127.0.0.1")
        yield endpoint
    finally:
        environment.undo()
        stop_process(process.pid, process.name)


def client(endpoint: S3Endpoint) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=endpoint.endpoint_url,
        aws_access_key_id=endpoint.access_key,
        aws_secret_access_key=endpoint.secret_key,
        region_name=endpoint.region,
    )


def new_table(endpoint: S3Endpoint, bucket: str, versioned: bool) -> StorageLocation:
    s3 = client(endpoint)
    s3.create_bucket(Bucket=bucket)
    if versioned:
        s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    for name in (D1, D2):
        s3.put_object(Bucket=bucket, Key=f"warehouse/t/{name}/bucket_00000", Body=name.encode() * 20)
        s3.put_object(Bucket=bucket, Key=f"warehouse/t/{name}/_orc_acid_version", Body=b"2")
    return open_location(f"s3a://{bucket}/warehouse/t")


def info(location: StorageLocation, create_time: int = 1000) -> TableInfo:
    return TableInfo("sales", "t", location.uri, {}, (), (), 1, (), None, create_time=create_time)


def clean(location: StorageLocation, policy: TrashPolicy) -> Removal:
    cleanup = CheckedCleanup(
        TableIdentity.of(info(location)),
        tuple(checked_directory(location.fs, location.child(name), name) for name in (D1, D2)),
    )
    versioned = bool(location.fs.versioned(location.path))
    planned = PlannedRemoval(
        cleanup,
        location.fs,
        location.child,
        lambda: info(location),
        {},
        lambda read: disposal_for(location.fs, policy, read.parameters, NOW, versioned=versioned),
    )
    [removal] = remove_all([planned], lambda function, items: [function(item) for item in items], lambda: None)
    return removal


def ledger(location: StorageLocation, removal: Removal) -> Ledger:
    return Ledger("c", "sales.t", None, "v", location.uri, TableIdentity.of(info(location)), removal.files, NOW)


def contents(endpoint: S3Endpoint, bucket: str) -> dict[str, bytes]:
    s3 = client(endpoint)
    keys = [item["Key"] for item in s3.list_objects_v2(Bucket=bucket, Prefix="warehouse/t/").get("Contents", [])]
    return {key: s3.get_object(Bucket=bucket, Key=key)["Body"].read() for key in keys if not key.endswith("/")}


def test_a_versioned_bucket_keeps_versions_and_undo_copies_them_back(s3: S3Endpoint) -> None:
    location = new_table(s3, "versioned-trash", versioned=True)
    before = contents(s3, "versioned-trash")
    removal = clean(location, TrashPolicy(root="versioned-trash/.trash"))  # a versioned bucket needs no root
    assert contents(s3, "versioned-trash") == {}
    assert len(removal.files) == 4 and all(item.went.startswith("version:") for item in removal.files)
    plan = plan_undo(ledger(location, removal), location.fs, location.path, lambda: info(location))
    assert len(plan.restores) == 4 and plan.refused == ()
    result = apply_undo(plan, location.fs)
    assert len(result.restored) == 4 and result.refused == ()
    assert contents(s3, "versioned-trash") == before


@pytest.mark.rule9
def test_an_expired_version_is_refused_and_a_key_in_the_way_is_not_overwritten(s3: S3Endpoint) -> None:
    location = new_table(s3, "versioned-expired", versioned=True)
    removal = clean(location, TrashPolicy())
    s3_client = client(s3)
    gone = next(item for item in removal.files if item.directory == D1 and item.path == "bucket_00000")
    s3_client.delete_object(
        Bucket="versioned-expired", Key=f"warehouse/t/{D1}/bucket_00000", VersionId=gone.went.removeprefix("version:")
    )
    s3_client.put_object(Bucket="versioned-expired", Key=f"warehouse/t/{D2}/bucket_00000", Body=b"in the way")
    plan = plan_undo(ledger(location, removal), location.fs, location.path, lambda: info(location))
    reasons = {(item.file.directory, item.file.path): item.reason for item in plan.refused}
    assert "no longer kept" in reasons[(D1, "bucket_00000")]
    assert "exists again" in reasons[(D2, "bucket_00000")] and "exists again" in reasons[(D2, "_orc_acid_version")]
    apply_undo(plan, location.fs)
    after = contents(s3, "versioned-expired")
    assert after[f"warehouse/t/{D2}/bucket_00000"] == b"in the way"
    assert set(after) == {f"warehouse/t/{D2}/bucket_00000", f"warehouse/t/{D1}/_orc_acid_version"}


def test_an_unversioned_bucket_moves_to_the_trash_root_and_undo_moves_back(s3: S3Endpoint) -> None:
    location = new_table(s3, "plain-trash", versioned=False)
    before = contents(s3, "plain-trash")
    removal = clean(location, TrashPolicy(root="plain-trash/.acidclean-trash"))
    assert contents(s3, "plain-trash") == {}
    assert all(
        item.went.startswith("trash:plain-trash/.acidclean-trash/261202063000/plain-trash/warehouse/t/")
        for item in removal.files
    )
    plan = plan_undo(ledger(location, removal), location.fs, location.path, lambda: info(location))
    assert len(plan.restores) == 4, plan.refused
    assert len(apply_undo(plan, location.fs).restored) == 4
    assert contents(s3, "plain-trash") == before


def test_an_unversioned_bucket_without_a_trash_root_deletes_outright(s3: S3Endpoint, tmp_path: Path) -> None:
    location = new_table(s3, "plain-gone", versioned=False)
    removal = clean(location, TrashPolicy())
    assert {item.went for item in removal.files} == {"gone"} and contents(s3, "plain-gone") == {}
