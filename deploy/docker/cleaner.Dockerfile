# syntax=docker/dockerfile:1
# The cleaner image: `acidclean cleaner` (and audit, initiator, stack status) without pyspark, pyorc or
# matplotlib (the vacuum and plot extras), so no JDK either: HDFS is reached through hdfs-native, S3
# through pyarrow. It has the kerberos extra (gssapi, for a metastore with hive.metastore.sasl.enabled)
# and MIT Kerberos' GSSAPI library, which hdfs-native's Kerberos loads too. Build from the repository root:
#   docker build -f deploy/docker/cleaner.Dockerfile -t acidclean-cleaner:0.1.0 .
# or `make images` (buildah; the base a Debian made by debootstrap where no image registry is reachable).
ARG PYTHON_IMAGE=python:3.11.10-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# gssapi publishes wheels for Windows and macOS only (none for Linux, manylinux included): pip builds it
# from the sdist against MIT Kerberos' headers and krb5-config (libkrb5-dev), with a C compiler and
# Python's headers (libpython3.11-dev: the python image has its own, the Debian base of `make images`
# has none). Only this stage has them; the runtime stage gets the shared libraries.
RUN apt-get update \
 && apt-get install --yes --no-install-recommends gcc=4:12.2.* libc6-dev=2.36-* libkrb5-dev=1.20.* \
      libpython3.11-dev=3.11.* \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# acidclean/ holds symbolic links to the top-level folders: copy both so the wheel build resolves them.
COPY pyproject.toml README.md ./
COPY acidclean/ acidclean/
COPY consumers/ consumers/
COPY deploy/ deploy/
COPY producers/ producers/
COPY schemas/ schemas/
COPY shared/ shared/
RUN python -m venv /opt/acidclean \
 && /opt/acidclean/bin/pip install --no-compile '.[kerberos]' \
 && /opt/acidclean/bin/acidclean cleaner --help > /dev/null

FROM ${PYTHON_IMAGE}
# libgssapi-krb5-2 and libkrb5-3: the MIT Kerberos libraries gssapi was built against (the realm's
# krb5.conf is mounted at run time; KRB5_CONFIG names it). A fixed numeric user, so runAsNonRoot can
# check it and the chart's runAsUser matches.
RUN apt-get update \
 && apt-get install --yes --no-install-recommends libgssapi-krb5-2=1.20.* libkrb5-3=1.20.* \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 acidclean \
 && useradd --system --uid 10001 --gid acidclean --home-dir /nonexistent --no-create-home \
      --shell /usr/sbin/nologin acidclean
COPY --from=build /opt/acidclean /opt/acidclean
# No bytecode written at run time: the chart mounts the root file system read-only.
ENV PATH=/opt/acidclean/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    ACIDCLEAN_STATE_DIR=/tmp/acidclean
# gssapi loads with the runtime stage's libraries (its extension modules link libgssapi_krb5 at import).
RUN ["python", "-c", "import gssapi"]
USER 10001:10001
WORKDIR /tmp
EXPOSE 9464
ENTRYPOINT ["acidclean"]
CMD ["cleaner", "--metrics-port", "9464"]
