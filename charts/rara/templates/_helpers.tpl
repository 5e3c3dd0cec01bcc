{{/* Names: <release>-rara, unless the release is already called rara. */}}
{{- define "rara.fullname" -}}
{{- if contains "rara" .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-rara" .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "rara.labels" -}}
app.kubernetes.io/name: rara
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Selector labels of one component: (dict "root" $ "component" "operator") */}}
{{- define "rara.selector" -}}
app.kubernetes.io/name: rara
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "rara.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (printf "%s-operator" (include "rara.fullname" .)) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "rara.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "rara.executorImage" -}}
{{- printf "%s:%s" .Values.executorImage.repository (default .Chart.AppVersion .Values.executorImage.tag) -}}
{{- end -}}

{{- define "rara.databaseSecret" -}}
{{- default (printf "%s-database" (include "rara.fullname" .)) .Values.database.existingSecret -}}
{{- end -}}

{{- define "rara.tokenSecret" -}}
{{- default (printf "%s-executor-token" (include "rara.fullname" .)) .Values.executorToken.existingSecret -}}
{{- end -}}

{{/*
How every process gets its settings: environment variables RARA_<PROCESS>_<SETTING>
(pydantic-settings in rara/settings.py; flags would override them, the chart passes none).
Call with (dict "prefix" "RARA_WORKER_" "settings" (dict "handlers" "a.b" ...)); list values
are joined with commas, which the settings split again.
*/}}
{{- define "rara.settingsEnv" -}}
{{- range $key, $value := .settings }}
- name: {{ printf "%s%s" $.prefix (upper $key) }}
  value: {{ ternary (join "," $value) (toString $value) (kindIs "slice" $value) | quote }}
{{- end }}
{{- end -}}

{{/*
The database URL, by reference to its Secret, under the env name of the process that reads
it: (dict "root" $ "name" "RARA_WORKER_DATABASE_URL"). Never a literal value in a pod spec.
*/}}
{{- define "rara.databaseEnv" -}}
- name: {{ .name }}
  valueFrom:
    secretKeyRef:
      name: {{ include "rara.databaseSecret" .root }}
      key: {{ .root.Values.database.secretKey }}
{{- end -}}

{{/* Pods stop within the worker's shutdown grace (leases released), plus a margin. */}}
{{- define "rara.terminationGrace" -}}
{{- add .Values.worker.shutdownGraceSeconds .Values.worker.terminationMarginSeconds -}}
{{- end -}}

{{- define "rara.probes" -}}
readinessProbe:
  httpGet: {path: {{ .Values.metrics.readyPath }}, port: metrics}
  periodSeconds: 5
  failureThreshold: 3
livenessProbe:
  httpGet: {path: {{ .Values.metrics.healthPath }}, port: metrics}
  initialDelaySeconds: 10
  periodSeconds: 10
  failureThreshold: 6
{{- end -}}

{{/*
A worker's environment: its database by reference, then its settings. Call with
(dict "root" $ "port" <metrics port> "settings" (dict <process-specific settings>)).
*/}}
{{- define "rara.workerEnv" -}}
{{- $root := .root }}
{{- include "rara.databaseEnv" (dict "root" $root "name" "RARA_WORKER_DATABASE_URL") }}
{{- $settings := merge (dict
      "metrics_port" .port
      "shutdown_grace_seconds" $root.Values.worker.shutdownGraceSeconds
      "artifact_root" "/var/lib/rara/artifacts"
      "log_level" $root.Values.logLevel) .settings }}
{{- include "rara.settingsEnv" (dict "prefix" "RARA_WORKER_" "settings" $settings) }}
- name: POD_NAME
  valueFrom: {fieldRef: {fieldPath: metadata.name}}
{{- end -}}

{{- define "rara.tokenVolume" -}}
- name: executor-token
  secret:
    secretName: {{ include "rara.tokenSecret" . }}
    defaultMode: 0440
    items: [{key: {{ .Values.executorToken.secretKey }}, path: token}]
{{- end -}}

{{- define "rara.tokenFile" -}}/var/run/rara/executor/token{{- end -}}


{{/*
The content-addressed artifact store every worker and executor shares. A ReadWriteMany claim
(artifacts.existingClaim) when steps of one run land in different pods; emptyDir only suits a
single pod (the executor and its sidecar worker).
*/}}
{{- define "rara.artifactsVolume" -}}
- name: artifacts
  {{- if .Values.artifacts.existingClaim }}
  persistentVolumeClaim: {claimName: {{ .Values.artifacts.existingClaim }}}
  {{- else }}
  emptyDir: {}
  {{- end }}
{{- end -}}

