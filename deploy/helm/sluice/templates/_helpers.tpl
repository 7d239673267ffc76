{{/* Chart name, truncated to the 63 characters DNS labels allow. */}}
{{- define "sluice.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Full name: release-chart unless the release name already contains the chart name. */}}
{{- define "sluice.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "sluice.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sluice.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "sluice.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "sluice.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "sluice.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "sluice.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The settings sluice reads from config, checked here so a mistake fails at render time. */}}
{{- define "sluice.port" -}}
{{- int (default 30000 (index .Values.config "port")) -}}
{{- end -}}

{{- define "sluice.adminPort" -}}
{{- int (default 0 (index .Values.config "admin-port")) -}}
{{- end -}}

{{- define "sluice.discovery" -}}
{{- if index .Values.config "service-discovery" }}true{{ end -}}
{{- end -}}

{{- define "sluice.clusterAdmission" -}}
{{- if eq (toString (index .Values.config "admission-coordination")) "kubernetes" }}true{{ end -}}
{{- end -}}

{{- define "sluice.admissionNamespace" -}}
{{- default .Release.Namespace (index .Values.config "admission-namespace") -}}
{{- end -}}

{{/* The API token is mounted only when discovery or cluster admission talks to the API server. */}}
{{- define "sluice.kubeAPI" -}}
{{- if or (include "sluice.discovery" .) (include "sluice.clusterAdmission" .) }}true{{ end -}}
{{- end -}}

{{/* config.yaml: the config values, with cluster admission's Service and namespace filled in. */}}
{{- define "sluice.config" -}}
{{- $cfg := deepCopy .Values.config -}}
{{- if include "sluice.clusterAdmission" . -}}
{{- if not (index $cfg "admission-service") -}}
{{- $_ := set $cfg "admission-service" (printf "%s-headless" (include "sluice.fullname" .)) -}}
{{- end -}}
{{- $_ := set $cfg "admission-namespace" (include "sluice.admissionNamespace" .) -}}
{{- end -}}
{{- toYaml $cfg -}}
{{- end -}}

{{- define "sluice.secretName" -}}
{{- default (printf "%s-auth" (include "sluice.fullname" .)) .Values.auth.existingSecret -}}
{{- end -}}

{{- define "sluice.hasSecret" -}}
{{- if or .Values.auth.existingSecret .Values.auth.apiKey .Values.auth.adminApiKey }}true{{ end -}}
{{- end -}}

{{- define "sluice.validate" -}}
{{- range $k := list "api-key" "admin-api-key" -}}
{{- if hasKey $.Values.config $k -}}
{{- fail (printf "config.%s would put a secret in a ConfigMap: set auth.apiKey / auth.adminApiKey or auth.existingSecret instead" $k) -}}
{{- end -}}
{{- end -}}
{{- if hasKey .Values.config "config" -}}
{{- fail "config.config is not allowed: the chart passes the rendered config with --config" -}}
{{- end -}}
{{- if and (eq (include "sluice.port" .) "0") -}}
{{- fail "config.port must be set (the Service and probes target it)" -}}
{{- end -}}
{{- if and (include "sluice.clusterAdmission" .) (not .Values.headlessService.enabled) -}}
{{- fail "config.admission-coordination kubernetes takes its members from the headless Service: set headlessService.enabled" -}}
{{- end -}}
{{- end -}}
