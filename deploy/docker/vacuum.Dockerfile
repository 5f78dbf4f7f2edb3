# syntax=docker/dockerfile:1
# The vacuum image: `acidclean vacuum` on Spark (the pyspark wheel is Spark 4.0 with its jars, Hadoop's
# shaded client 3.4.1 included, which is what HDFS needs), a Java 17 runtime, and for s3a:// the
# hadoop-aws jar of the same Hadoop version with the AWS SDK v2 bundle it was built against. Use it as
# the driver image of spark-submit (or with the Spark operator), executors from the same image. The
# kerberos extra (gssapi) and MIT Kerberos' libraries are in, for a metastore that requires Kerberos.
#   docker build -f deploy/docker/vacuum.Dockerfile -t acidclean-vacuum:0.1.0 .
# or `make images` (buildah; the base a Debian made by debootstrap where no image registry is reachable).
ARG PYTHON_IMAGE=python:3.11.10-slim-bookworm

FROM ${PYTHON_IMAGE} AS jars
# Versions must match the pyspark wheel's hadoop-client-api (3.4.1) and hadoop-aws 3.4.1's pom.
ARG HADOOP_VERSION=3.4.1
ARG AWS_SDK_VERSION=2.24.6
ARG HADOOP_AWS_SHA1=641d8fe1d7683cdcc05cc3a794c0374553f6bd6a
ARG AWS_SDK_SHA1=242317b028d951dbbf6a142241e041b684696a3b
ARG MAVEN=https://repo1.maven.org/maven2
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN apt-get update \
 && apt-get install --yes --no-install-recommends ca-certificates=20230311* curl=7.88.* \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /jars
RUN curl -fsSLo hadoop-aws-${HADOOP_VERSION}.jar \
      "${MAVEN}/org/apache/hadoop/hadoop-aws/${HADOOP_VERSION}/hadoop-aws-${HADOOP_VERSION}.jar" \
 && curl -fsSLo bundle-${AWS_SDK_VERSION}.jar \
      "${MAVEN}/software/amazon/awssdk/bundle/${AWS_SDK_VERSION}/bundle-${AWS_SDK_VERSION}.jar" \
 && printf '%s  %s\n' "${HADOOP_AWS_SHA1}" "hadoop-aws-${HADOOP_VERSION}.jar" \
      "${AWS_SDK_SHA1}" "bundle-${AWS_SDK_VERSION}.jar" | sha1sum --check --strict

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# gssapi has no Linux wheels on PyPI: it builds from the sdist against libkrb5-dev, with a C compiler
# and Python's headers (libpython3.11-dev, for a base without them).
RUN apt-get update \
 && apt-get install --yes --no-install-recommends gcc=4:12.2.* libc6-dev=2.36-* libkrb5-dev=1.20.* \
      libpython3.11-dev=3.11.* \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md ./
COPY acidclean/ acidclean/
COPY consumers/ consumers/
COPY deploy/ deploy/
COPY producers/ producers/
COPY schemas/ schemas/
COPY shared/ shared/
RUN python -m venv /opt/acidclean \
 && /opt/acidclean/bin/pip install --no-compile '.[vacuum,kerberos]'

FROM ${PYTHON_IMAGE}
RUN apt-get update \
 && apt-get install --yes --no-install-recommends openjdk-17-jre-headless=17.* procps=2:4.* \
      libgssapi-krb5-2=1.20.* libkrb5-3=1.20.* \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 acidclean \
 && useradd --system --uid 10001 --gid acidclean --home-dir /nonexistent --no-create-home \
      --shell /usr/sbin/nologin acidclean \
 && ln -s "$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")" /opt/java
COPY --from=build /opt/acidclean /opt/acidclean
# Spark puts every jar of SPARK_HOME/jars on the classpath: the S3A client goes beside Hadoop's.
COPY --from=jars /jars/ /opt/acidclean/lib/python3.11/site-packages/pyspark/jars/
ENV JAVA_HOME=/opt/java \
    SPARK_HOME=/opt/acidclean/lib/python3.11/site-packages/pyspark \
    PYSPARK_PYTHON=/opt/acidclean/bin/python \
    PATH=/opt/acidclean/bin:/opt/acidclean/lib/python3.11/site-packages/pyspark/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    ACIDCLEAN_STATE_DIR=/tmp/acidclean
RUN ["python", "-c", "import gssapi"]
USER 10001:10001
WORKDIR /tmp
ENTRYPOINT ["acidclean"]
CMD ["vacuum", "--help"]
