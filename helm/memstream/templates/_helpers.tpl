{{/* Names ---------------------------------------------------------------------------------- */}}
{{- define "memstream.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "memstream.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "memstream.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels: common to every object; selector labels name the release and the component. */}}
{{- define "memstream.labels" -}}
helm.sh/chart: {{ include "memstream.chart" . }}
{{ include "memstream.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: memstream
{{- end }}

{{- define "memstream.selectorLabels" -}}
app.kubernetes.io/name: {{ include "memstream.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "memstream.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* A value as an environment variable's text: lists comma-separated, maps as JSON, whole
numbers without an exponent (values files give numbers as float64). */}}
{{- define "memstream.envValue" -}}
{{- if kindIs "slice" . }}{{ join "," . }}
{{- else if kindIs "map" . }}{{ toJson . }}
{{- else if and (kindIs "float64" .) (eq (float64 (int64 .)) .) }}{{ int64 . }}
{{- else }}{{ toString . }}
{{- end }}
{{- end }}

{{/* The settings every pod shares (the ConfigMap's data; the topics Job, a pre-install hook,
renders the same map inline because the ConfigMap does not exist yet when it runs). */}}
{{- define "memstream.configData" -}}
{{- $k := .Values.kafka }}
MEMSTREAM_BOOTSTRAP_SERVERS: {{ required "kafka.bootstrapServers is required (host:port[,host:port])" $k.bootstrapServers | quote }}
MEMSTREAM_STORE: "qdrant"
MEMSTREAM_QDRANT_URL: {{ required "qdrant.url is required (e.g. http://qdrant:6333)" .Values.qdrant.url | quote }}
MEMSTREAM_DATA_DIR: "/data"
MEMSTREAM_WORKERS: "1"
MEMSTREAM_METRICS_HOST: "0.0.0.0"
MEMSTREAM_METRICS_PORT: {{ .Values.workers.metricsPort | int | toString | quote }}
MEMSTREAM_TOPIC_PARTITIONS: {{ $k.topics.partitions | int | toString | quote }}
MEMSTREAM_TOPIC_REPLICATION_FACTOR: {{ $k.topics.replicationFactor | int | toString | quote }}
MEMSTREAM_TOPIC_RETENTION_MS: {{ include "memstream.envValue" (default (dict) $k.topics.retentionMs) | quote }}
MEMSTREAM_KAFKA_SECURITY_PROTOCOL: {{ $k.securityProtocol | quote }}
{{- if hasPrefix "SASL_" $k.securityProtocol }}
MEMSTREAM_KAFKA_SASL_MECHANISM: {{ $k.sasl.mechanism | quote }}
MEMSTREAM_KAFKA_SASL_USERNAME: {{ required "kafka.sasl.username is required with a SASL_* securityProtocol" $k.sasl.username | quote }}
{{- end }}
{{- if $k.tls.caSecret.name }}
MEMSTREAM_KAFKA_SSL_CAFILE: "/etc/memstream/kafka-ca/{{ $k.tls.caSecret.key }}"
{{- end }}
{{- if $k.tls.clientSecret.name }}
MEMSTREAM_KAFKA_SSL_CERTFILE: "/etc/memstream/kafka-client/{{ $k.tls.clientSecret.certKey }}"
MEMSTREAM_KAFKA_SSL_KEYFILE: "/etc/memstream/kafka-client/{{ $k.tls.clientSecret.keyKey }}"
{{- end }}
{{- range $name, $value := .Values.config }}
{{- if not (kindIs "invalid" $value) }}
{{ $name }}: {{ include "memstream.envValue" $value | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/* Secrets as environment variables (secretKeyRef); "gateway" adds the gateway's API keys. */}}
{{- define "memstream.secretEnv" -}}
{{- $v := .root.Values }}
{{- if hasPrefix "SASL_" $v.kafka.securityProtocol }}
- name: MEMSTREAM_KAFKA_SASL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ required "kafka.sasl.passwordSecret.name is required with a SASL_* securityProtocol" $v.kafka.sasl.passwordSecret.name }}
      key: {{ $v.kafka.sasl.passwordSecret.key }}
{{- end }}
{{- with $v.qdrant.apiKeySecret }}{{ if .name }}
- name: MEMSTREAM_QDRANT_API_KEY
  valueFrom:
    secretKeyRef: {name: {{ .name }}, key: {{ .key }}}
{{- end }}{{ end }}
{{- with $v.secrets.openaiApiKey }}{{ if .name }}
- name: MEMSTREAM_OPENAI_API_KEY
  valueFrom:
    secretKeyRef: {name: {{ .name }}, key: {{ .key }}}
{{- end }}{{ end }}
{{- if .llm }}
{{- with $v.secrets.llmApiKey }}{{ if .name }}
- name: MEMSTREAM_LLM_API_KEY
  valueFrom:
    secretKeyRef: {name: {{ .name }}, key: {{ .key }}}
{{- end }}{{ end }}
{{- end }}
{{- if .gateway }}
{{- with $v.secrets.gatewayApiKeys }}{{ if .name }}
- name: MEMSTREAM_API_KEYS
  valueFrom:
    secretKeyRef: {name: {{ .name }}, key: {{ .key }}}
{{- end }}{{ end }}
{{- end }}
{{- end }}

{{/* Volumes every memstream pod has: the data dir and /tmp (the root file system is read-only),
and the Kafka CA / client certificate when configured. */}}
{{- define "memstream.volumes" -}}
- name: data
  emptyDir:
    sizeLimit: {{ .Values.dataVolume.sizeLimit }}
- name: tmp
  emptyDir:
    sizeLimit: {{ .Values.tmpVolume.sizeLimit }}
{{- with .Values.kafka.tls.caSecret }}{{ if .name }}
- name: kafka-ca
  secret:
    secretName: {{ .name }}
    items: [{key: {{ .key }}, path: {{ .key }}}]
{{- end }}{{ end }}
{{- with .Values.kafka.tls.clientSecret }}{{ if .name }}
- name: kafka-client
  secret:
    secretName: {{ .name }}
    items:
      - {key: {{ .certKey }}, path: {{ .certKey }}}
      - {key: {{ .keyKey }}, path: {{ .keyKey }}}
{{- end }}{{ end }}
{{- end }}

{{- define "memstream.volumeMounts" -}}
- name: data
  mountPath: /data
- name: tmp
  mountPath: /tmp
{{- if .Values.kafka.tls.caSecret.name }}
- name: kafka-ca
  mountPath: /etc/memstream/kafka-ca
  readOnly: true
{{- end }}
{{- if .Values.kafka.tls.clientSecret.name }}
- name: kafka-client
  mountPath: /etc/memstream/kafka-client
  readOnly: true
{{- end }}
{{- end }}

{{/* Pod-level settings shared by every memstream pod. */}}
{{- define "memstream.podSpec" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.serviceAccountName }}
serviceAccountName: {{ . }}
{{- end }}
automountServiceAccountToken: false
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- end }}

{{/* The topic names KEDA and NOTES refer to. */}}
{{- define "memstream.topic" -}}
{{- $prefix := "memstream." }}
{{- if hasKey .root.Values.config "MEMSTREAM_TOPIC_PREFIX" }}{{ $prefix = toString (index .root.Values.config "MEMSTREAM_TOPIC_PREFIX") }}{{ end }}
{{- printf "%s%s" $prefix .name }}
{{- end }}

{{- define "memstream.appId" -}}
{{- $id := "memstream" }}
{{- if hasKey .Values.config "MEMSTREAM_APP_ID" }}{{ $id = toString (index .Values.config "MEMSTREAM_APP_ID") }}{{ end }}
{{- $id }}
{{- end }}
