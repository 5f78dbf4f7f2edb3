#!/usr/bin/env bash
# Turn one VacuumRequested into one spark-submit, for clusters that run each Spark job on its own
# (instead of `acidclean vacuum-service`, which runs every request in one long-running SparkSession).
# A scheduler that reads the vacuum requests topic (Airflow, Argo Events, a Kafka Connect sink...)
# calls it once per request with the event's JSON value. The job is `acidclean vacuum-request`: it
# publishes VacuumStarted, then VacuumCommitted with the request's id or VacuumFailed, exactly as the
# service does, and a request answered before is not run again (safe to submit twice).
# Exit status is the job's: 0 answered, 1 VacuumFailed, 3 not acknowledged by Kafka (submit again).
# Usage: vacuum-request-spark-submit.sh REQUEST.json [--config FILE]   (or - to read the JSON on stdin)
set -euo pipefail
# Kerberos (a kerberized HDFS or metastore): ACIDCLEAN_KEYTAB and ACIDCLEAN_PRINCIPAL make the driver log in
# with the keytab (--principal/--keytab): Spark obtains and renews the Hadoop delegation tokens, and YARN
# hands them to every executor container (HADOOP_TOKEN_FILE_LOCATION), which hdfs-native reads.
REQUEST_FILE=${1:?usage: vacuum-request-spark-submit.sh REQUEST.json [--config FILE]}
shift
REQUEST=$(cat "$REQUEST_FILE")  # passed inline: a cluster-mode driver does not see this host's files
ENTRY=$(python -c 'import os, acidclean; print(os.path.join(os.path.dirname(acidclean.__file__), "__main__.py"))')
# One application per request, named after the table so the cluster's UI tells them apart.
TABLE=$(python -c 'import json, sys; r = json.loads(sys.argv[1]); print(r["table"] + ("/" + r["partition"] if r.get("partition") else ""))' "$REQUEST")
exec spark-submit \
  --master "${SPARK_MASTER:-yarn}" --deploy-mode "${SPARK_DEPLOY_MODE:-client}" \
  --name "acidclean-vacuum $TABLE" \
  --conf spark.executor.instances=4 --conf spark.executor.cores=2 \
  ${ACIDCLEAN_VENV_ARCHIVE:+--archives "$ACIDCLEAN_VENV_ARCHIVE#venv" --conf spark.pyspark.python=./venv/bin/python} \
  ${ACIDCLEAN_KEYTAB:+--principal "${ACIDCLEAN_PRINCIPAL:?ACIDCLEAN_KEYTAB needs ACIDCLEAN_PRINCIPAL}" --keytab "$ACIDCLEAN_KEYTAB"} \
  "$ENTRY" vacuum-request "$REQUEST" "$@"
