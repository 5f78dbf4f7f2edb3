{{/* Names: one release per tenant. */}}
{{- define "acidclean.fullname" -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "acidclean.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: cleaner
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
acidclean.io/tenant: {{ .Values.tenant }}
{{- end -}}

{{- define "acidclean.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: cleaner
{{- end -}}

{{/* The tenant's topic prefix, consumer group and topic names, as acidclean computes them. */}}
{{- define "acidclean.topicPrefix" -}}{{ .Values.tenant }}.{{- end -}}
{{- define "acidclean.group" -}}{{ .Values.kafka.groupId }}.{{ .Values.tenant }}{{- end -}}
{{- define "acidclean.vacuumTopic" -}}{{ include "acidclean.topicPrefix" . }}acid.vacuum.committed{{- end -}}
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
