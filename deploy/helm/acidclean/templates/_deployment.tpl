{{/*
One component's Deployment (cleaner, initiator, vacuum-service): the same pod security, probes on the
metrics port's /healthz and /readyz, acidclean.properties, Kafka credentials and Kerberos mounts for
all. Called with a dict: root (the chart's context), component (container name and label), name,
image ({repository, tag, pullPolicy}), command (the acidclean subcommand), metricsPort, args (after
--config and --metrics-port), probes ({liveness, readiness}), resources, terminationGracePeriodSeconds, tmpSizeLimit and, without an
autoscaler, replicas.
*/}}
{{- define "acidclean.deployment" -}}
{{- $root := .root -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .name }}
  labels:
    {{- include "acidclean.componentLabels" . | nindent 4 }}
spec:
  {{- if hasKey . "replicas" }}
  replicas: {{ .replicas }}
  {{- end }}
  selector:
    matchLabels:
      {{- include "acidclean.componentSelectorLabels" . | nindent 6 }}
  strategy:
    type: RollingUpdate
    rollingUpdate: {maxSurge: 1, maxUnavailable: 0}
  template:
    metadata:
      labels:
        {{- include "acidclean.componentLabels" . | nindent 8 }}
      annotations:
        checksum/config: {{ include (print $root.Template.BasePath "/configmap.yaml") $root | sha256sum }}
        {{- if and $root.Values.kerberos.enabled $root.Values.kerberos.krb5Conf.inline (not $root.Values.kerberos.krb5Conf.existingConfigMap) }}
        checksum/krb5: {{ include (print $root.Template.BasePath "/krb5-configmap.yaml") $root | sha256sum }}
        {{- end }}
        {{- with $root.Values.podAnnotations }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
    spec:
      terminationGracePeriodSeconds: {{ .terminationGracePeriodSeconds }}
      automountServiceAccountToken: false
      securityContext:
        runAsNonRoot: true
        runAsUser: 10001
        runAsGroup: 10001
        fsGroup: 10001
        seccompProfile: {type: RuntimeDefault}
      containers:
        - name: {{ .component }}
          image: "{{ .image.repository }}:{{ .image.tag }}"
          imagePullPolicy: {{ .image.pullPolicy }}
          args:
            - {{ .command }}
            - --config
            - /etc/acidclean/acidclean.properties
            - --metrics-port
            - {{ .metricsPort | quote }}
            {{- range .args }}
            - {{ . | quote }}
            {{- end }}
          env:
            - name: ACIDCLEAN_KAFKA_SASL_USERNAME
              {{- if and $root.Values.strimzi.enabled (not $root.Values.kafkaCredentials.existingSecret) }}
              value: {{ include "acidclean.kafkaUser" $root | quote }}
              {{- else }}
              valueFrom: {secretKeyRef: {name: {{ include "acidclean.credentialsSecret" $root }}, key: username}}
              {{- end }}
            - name: ACIDCLEAN_KAFKA_SASL_PASSWORD
              valueFrom: {secretKeyRef: {name: {{ include "acidclean.credentialsSecret" $root }}, key: password}}
            {{- if $root.Values.kerberos.enabled }}
            - name: KRB5_CONFIG  # the realm's krb5.conf, for gssapi (MIT Kerberos)
              value: {{ include "acidclean.krb5Path" $root }}
            - name: KRB5_CLIENT_KTNAME  # MIT Kerberos logs in from it by itself (the storage clients)
              value: {{ include "acidclean.keytabPath" $root }}
            {{- end }}
            {{- if and (eq .component "vacuum-service") (include "acidclean.sparkKerberos" $root) }}
            - name: SPARK_CONF_DIR  # spark-defaults.conf of the ConfigMap: the keytab for the executors
              value: /etc/acidclean
            {{- end }}
          ports:
            - {name: metrics, containerPort: {{ .metricsPort }}, protocol: TCP}
          livenessProbe:
            httpGet: {path: /healthz, port: metrics}
            {{- toYaml (index .probes "liveness") | nindent 12 }}
          readinessProbe:
            httpGet: {path: /readyz, port: metrics}
            {{- toYaml (index .probes "readiness") | nindent 12 }}
          securityContext:
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            capabilities: {drop: ["ALL"]}
          resources:
            {{- toYaml .resources | nindent 12 }}
          volumeMounts:
            - {name: config, mountPath: /etc/acidclean, readOnly: true}
            - {name: tmp, mountPath: /tmp}  # ACIDCLEAN_STATE_DIR; the root file system is read-only
            {{- if $root.Values.kerberos.enabled }}
            - {name: keytab, mountPath: {{ include "acidclean.keytabDir" $root }}, readOnly: true}
            - {name: krb5, mountPath: {{ include "acidclean.krb5Dir" $root }}, readOnly: true}
            {{- end }}
      volumes:
        - name: config
          configMap: {name: {{ include "acidclean.fullname" $root }}}
        - name: tmp
          emptyDir: {sizeLimit: {{ .tmpSizeLimit }}}
        {{- if $root.Values.kerberos.enabled }}
        - name: keytab  # metastore_client_keytab; readable by the pod's group (fsGroup) only
          secret:
            secretName: {{ $root.Values.kerberos.keytab.existingSecret }}
            defaultMode: 288  # 0440
            items: [{key: {{ $root.Values.kerberos.keytab.key | quote }}, path: acidclean.keytab}]
        - name: krb5
          configMap:
            name: {{ include "acidclean.krb5ConfigMap" $root }}
            items: [{key: {{ ternary $root.Values.kerberos.krb5Conf.key "krb5.conf" (ne $root.Values.kerberos.krb5Conf.existingConfigMap "") | quote }}, path: krb5.conf}]
        {{- end }}
      {{- with $root.Values.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $root.Values.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $root.Values.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
{{- end -}}

{{/* A component's PodDisruptionBudget: dict "root" . "component" NAME "name" NAME. */}}
{{- define "acidclean.pdb" -}}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ .name }}
  labels:
    {{- include "acidclean.componentLabels" . | nindent 4 }}
spec:
  maxUnavailable: {{ .root.Values.podDisruptionBudget.maxUnavailable }}
  selector:
    matchLabels:
      {{- include "acidclean.componentSelectorLabels" . | nindent 6 }}
{{- end -}}
