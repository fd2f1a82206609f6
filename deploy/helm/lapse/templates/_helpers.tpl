{{- define "lapse.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "lapse.fullname" -}}
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

{{- define "lapse.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "lapse.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "lapse.selectorLabels" -}}
app.kubernetes.io/name: {{ include "lapse.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The instances' pods: not the migration Job's, which the Service must not reach. */}}
{{- define "lapse.serverSelectorLabels" -}}
{{ include "lapse.selectorLabels" . }}
app.kubernetes.io/component: server
{{- end }}

{{- define "lapse.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* The store URL, for the instances and the migration Job alike. */}}
{{- define "lapse.storeEnv" -}}
- name: LAPSE_STORE
  valueFrom:
    secretKeyRef:
      name: {{ .Values.store.existingSecret | default (include "lapse.fullname" .) }}
      key: {{ .Values.store.key }}
{{- end }}
