{{/* Names: one release per tenant. */}}
{{- define "acidclean.fullname" -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "acidclean.labels" -}}
{{ include "acidclean.componentLabels" (dict "root" . "component" "cleaner") }}
{{- end -}}

{{- define "acidclean.selectorLabels" -}}
{{ include "acidclean.componentSelectorLabels" (dict "root" . "component" "cleaner") }}
{{- end -}}

{{/* The same for any component (cleaner, initiator, vacuum-service): dict "root" . "component" NAME. */}}
{{- define "acidclean.componentLabels" -}}
{{- $root := .root -}}
app.kubernetes.io/name: {{ $root.Chart.Name }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/version: {{ $root.Chart.AppVersion | quote }}
app.kubernetes.io/component: {{ .component }}
app.kubernetes.io/managed-by: {{ $root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" $root.Chart.Name $root.Chart.Version }}
acidclean.io/tenant: {{ $root.Values.tenant }}
{{- end -}}

{{- define "acidclean.componentSelectorLabels" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* The tenant's topic prefix, consumer group and topic names, as acidclean computes them. */}}
{{- define "acidclean.topicPrefix" -}}{{ .Values.tenant }}.{{- end -}}
{{- define "acidclean.group" -}}{{ .Values.kafka.groupId }}.{{ .Values.tenant }}{{- end -}}
{{- define "acidclean.initiatorGroup" -}}{{ .Values.initiator.groupId }}.{{ .Values.tenant }}{{- end -}}
{{- define "acidclean.vacuumServiceGroup" -}}{{ .Values.vacuumService.groupId }}.{{ .Values.tenant }}{{- end -}}
{{- define "acidclean.vacuumTopic" -}}{{ include "acidclean.topicPrefix" . }}acid.vacuum.committed{{- end -}}
{{- define "acidclean.deltaTopic" -}}{{ include "acidclean.topicPrefix" . }}acid.delta.committed{{- end -}}
{{- define "acidclean.requestsTopic" -}}{{ include "acidclean.topicPrefix" . }}acid.vacuum.requests{{- end -}}
{{- define "acidclean.initiatorName" -}}{{ printf "%s-initiator" (include "acidclean.fullname" . | trunc 53 | trimSuffix "-") }}{{- end -}}
{{- define "acidclean.hiveQueueName" -}}{{ printf "%s-hive-queue" (include "acidclean.fullname" . | trunc 52 | trimSuffix "-") }}{{- end -}}
{{- define "acidclean.vacuumServiceName" -}}{{ printf "%s-vacuum-service" (include "acidclean.fullname" . | trunc 48 | trimSuffix "-") }}{{- end -}}

{{/* The running components, each as a dict: component, name (its Deployment), port (metrics), group,
     topic (the one whose lag says how much work waits), autoscaling (its values) and its alert prefix. */}}
{{- define "acidclean.components" -}}
{{- $list := list (dict "component" "cleaner" "name" (include "acidclean.fullname" .) "port" .Values.cleaner.metricsPort "group" (include "acidclean.group" .) "topic" (include "acidclean.vacuumTopic" .) "autoscaling" .Values.autoscaling) -}}
{{- if .Values.initiator.enabled -}}
{{- $list = append $list (dict "component" "initiator" "name" (include "acidclean.initiatorName" .) "port" .Values.initiator.metricsPort "group" (include "acidclean.initiatorGroup" .) "topic" (include "acidclean.deltaTopic" .) "autoscaling" .Values.initiator.autoscaling) -}}
{{- end -}}
{{- if .Values.vacuumService.enabled -}}
{{- $list = append $list (dict "component" "vacuum-service" "name" (include "acidclean.vacuumServiceName" .) "port" .Values.vacuumService.metricsPort "group" (include "acidclean.vacuumServiceGroup" .) "topic" (include "acidclean.requestsTopic" .) "autoscaling" .Values.vacuumService.autoscaling) -}}
{{- end -}}
{{- if .Values.hiveQueue.enabled -}}
{{- $list = append $list (dict "component" "hive-queue" "name" (include "acidclean.hiveQueueName" .) "port" .Values.hiveQueue.metricsPort "group" "" "topic" (include "acidclean.requestsTopic" .) "autoscaling" (dict "enabled" false)) -}}
{{- end -}}
{{- toJson $list -}}
{{- end -}}
{{- define "acidclean.kafkaUser" -}}{{ printf "acidclean-%s" .Values.tenant | trunc 63 | trimSuffix "-" }}{{- end -}}

{{- define "acidclean.credentialsSecret" -}}
{{- if .Values.kafkaCredentials.existingSecret -}}
{{ .Values.kafkaCredentials.existingSecret }}
{{- else if .Values.strimzi.enabled -}}
{{ include "acidclean.kafkaUser" . }}
{{- else -}}
{{ include "acidclean.fullname" . }}-kafka
{{- end -}}
{{- end -}}

{{/* Kerberos to the metastore (kerberos.enabled): where the keytab and krb5.conf are mounted. */}}
{{- define "acidclean.keytabDir" -}}/etc/security/keytabs{{- end -}}
{{- define "acidclean.keytabPath" -}}{{ include "acidclean.keytabDir" . }}/acidclean.keytab{{- end -}}
{{- define "acidclean.krb5Dir" -}}/etc/krb5{{- end -}}
{{- define "acidclean.krb5Path" -}}{{ include "acidclean.krb5Dir" . }}/krb5.conf{{- end -}}
{{- define "acidclean.krb5ConfigMap" -}}
{{- if .Values.kerberos.krb5Conf.existingConfigMap -}}
{{ .Values.kerberos.krb5Conf.existingConfigMap }}
{{- else -}}
{{ include "acidclean.fullname" . }}-krb5
{{- end -}}
{{- end -}}

{{/* Refuses Kerberos values that would start a cleaner unable to authenticate; renders nothing. */}}
{{- define "acidclean.kerberosCheck" -}}
{{- $keys := list "hive.metastore.sasl.enabled" "metastore_sasl_enabled" "hive.metastore.kerberos.principal" "metastore_kerberos_principal" "metastore_client_principal" "metastore_client_keytab" "metastore_client_ticket_cache" -}}
{{- range $key := $keys -}}
{{- if hasKey $.Values.config $key -}}
{{- fail (printf "config.%s: set Kerberos to the metastore with kerberos.* (enabled, metastorePrincipal, clientPrincipal, keytab, krb5Conf), which also mounts the keytab and krb5.conf" $key) -}}
{{- end -}}
{{- end -}}
{{- if .Values.kerberos.enabled -}}
{{- $k := .Values.kerberos -}}
{{- $_ := required "kerberos.metastorePrincipal: the metastore's service principal, as its hive.metastore.kerberos.principal names it (e.g. hive/_HOST@EXAMPLE.COM)" $k.metastorePrincipal -}}
{{- $_ := required "kerberos.clientPrincipal: the principal whose key the keytab holds (e.g. acidclean/analytics@EXAMPLE.COM)" $k.clientPrincipal -}}
{{- $_ := required "kerberos.keytab.existingSecret: a Secret holding the client principal's keytab (kubectl create secret generic NAME --from-file=acidclean.keytab)" $k.keytab.existingSecret -}}
{{- $_ := required "kerberos.keytab.key: the keytab's key in kerberos.keytab.existingSecret" $k.keytab.key -}}
{{- if and $k.krb5Conf.existingConfigMap $k.krb5Conf.inline -}}
{{- fail "kerberos.krb5Conf: set existingConfigMap or inline, not both" -}}
{{- else if not (or $k.krb5Conf.existingConfigMap $k.krb5Conf.inline) -}}
{{- fail "kerberos.krb5Conf: the realm's krb5.conf is needed: set existingConfigMap (a ConfigMap holding it under kerberos.krb5Conf.key) or inline (the file itself)" -}}
{{- end -}}
{{- if and $k.krb5Conf.existingConfigMap (not $k.krb5Conf.key) -}}
{{- fail "kerberos.krb5Conf.key: the key of krb5.conf in kerberos.krb5Conf.existingConfigMap" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Spark on Kubernetes with Kerberos (vacuumService.master k8s://... and kerberos.enabled): the vacuum's
     executors read and write the table's files from their own pods, so they need the keytab too. */}}
{{- define "acidclean.sparkKerberos" -}}
{{- if and .Values.vacuumService.enabled .Values.kerberos.enabled (hasPrefix "k8s://" .Values.vacuumService.master) -}}true{{- end -}}
{{- end -}}
