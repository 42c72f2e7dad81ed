{{/* The chart's name, or nameOverride. */}}
{{- define "tollgate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The objects' name: fullnameOverride, else the release name (with the chart's name when
the release name does not hold it). */}}
{{- define "tollgate.fullname" -}}
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

{{- define "tollgate.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels every object carries. */}}
{{- define "tollgate.labels" -}}
helm.sh/chart: {{ include "tollgate.chart" . }}
{{ include "tollgate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: rate-limit-service
{{- end }}

{{/* The labels that select the pods. */}}
{{- define "tollgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tollgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "tollgate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "tollgate.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "tollgate.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* The Secret holding the Redis URL (and password). */}}
{{- define "tollgate.redisSecret" -}}
{{- default (printf "%s-redis" (include "tollgate.fullname" .)) .Values.redis.existingSecret }}
{{- end }}

{{/* The Secret holding the admin token. */}}
{{- define "tollgate.adminSecret" -}}
{{- default (printf "%s-admin" (include "tollgate.fullname" .)) .Values.admin.existingSecret }}
{{- end }}

{{/* The key of the Redis password in the Redis Secret; empty when there is none. */}}
{{- define "tollgate.redisPasswordKey" -}}
{{- if .Values.redis.existingSecret }}
{{- .Values.redis.passwordKey }}
{{- else if .Values.redis.password }}
{{- default "password" .Values.redis.passwordKey }}
{{- end }}
{{- end }}
