#!/usr/bin/env bash
# Run the vacuum job on a cluster with spark-submit (here YARN client mode); `acidclean vacuum` runs
# the same job on local[*]. acidclean must be importable on the driver and the executors: install it
# on every node, or pack a virtual environment (venv-pack) and pass it with --archives as below.
# Usage: vacuum-spark-submit.sh DB.TABLE [--partition k=v] [--full] [--config FILE]
set -euo pipefail
# Kerberos (a kerberized HDFS or metastore): ACIDCLEAN_KEYTAB and ACIDCLEAN_PRINCIPAL make the driver log in
# with the keytab (--principal/--keytab): Spark obtains and renews the Hadoop delegation tokens, and YARN
# hands them to every executor container (HADOOP_TOKEN_FILE_LOCATION), which hdfs-native reads.
# The entry is acidclean's own command line (python -m acidclean), so arguments and exit codes match.
ENTRY=$(python -c 'import os, acidclean; print(os.path.join(os.path.dirname(acidclean.__file__), "__main__.py"))')
exec spark-submit \
  --master yarn --deploy-mode client \
  --conf spark.executor.instances=4 --conf spark.executor.cores=2 \
  ${ACIDCLEAN_VENV_ARCHIVE:+--archives "$ACIDCLEAN_VENV_ARCHIVE#venv" --conf spark.pyspark.python=./venv/bin/python} \
  ${ACIDCLEAN_KEYTAB:+--principal "${ACIDCLEAN_PRINCIPAL:?ACIDCLEAN_KEYTAB needs ACIDCLEAN_PRINCIPAL}" --keytab "$ACIDCLEAN_KEYTAB"} \
  "$ENTRY" vacuum "$@"
