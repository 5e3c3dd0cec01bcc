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
it: (dict "root" $ "name" "RARA_WORKER_DATABASE_URL" "process" "worker"). The process's own
login when database.<process>.existingSecret names one, else the owner's (database.*); no
process: the owner's (the migration Job). Never a literal value in a pod spec.
*/}}
{{- define "rara.databaseEnv" -}}
{{- $own := dict }}
{{- if .process }}{{ $own = index .root.Values.database .process }}{{ end }}
- name: {{ .name }}
  valueFrom:
    secretKeyRef:
      {{- if $own.existingSecret }}
      name: {{ $own.existingSecret }}
      key: {{ default .root.Values.database.secretKey $own.secretKey }}
      {{- else }}
      name: {{ include "rara.databaseSecret" .root }}
      key: {{ .root.Values.database.secretKey }}
      {{- end }}
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
{{- include "rara.databaseEnv" (dict "root" $root "name" "RARA_WORKER_DATABASE_URL" "process" "worker") }}
{{- $settings := merge (dict
      "metrics_port" .port
      "shutdown_grace_seconds" $root.Values.worker.shutdownGraceSeconds
      "artifact_root" "/var/lib/rara/artifacts"
      "log_level" $root.Values.logLevel) .settings }}
{{- if $root.Values.artifacts.s3.bucket }}{{ $_ := unset $settings "artifact_root" }}{{ end }}
{{- include "rara.settingsEnv" (dict "prefix" "RARA_WORKER_" "settings" $settings) }}
{{- include "rara.artifactsEnv" $root }}
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



{{/*
Artifacts in object storage (artifacts.s3.bucket set): RARA_ARTIFACTS, which worker and
executor both read (rara.artifacts.open_store) when no artifact_root is given, and the
credentials by reference to a Secret; without one, the pod's identity (web identity token,
container credentials, instance role). Nothing when the artifacts are on the shared volume.
*/}}
{{- define "rara.artifactsEnv" -}}
{{- with .Values.artifacts.s3 }}{{ if .bucket }}
- name: RARA_ARTIFACTS
  value: {{ include "rara.s3Url" . | quote }}
{{- if .existingSecret }}
- name: AWS_ACCESS_KEY_ID
  valueFrom: {secretKeyRef: {name: {{ .existingSecret }}, key: {{ .accessKeyIdKey }}}}
- name: AWS_SECRET_ACCESS_KEY
  valueFrom: {secretKeyRef: {name: {{ .existingSecret }}, key: {{ .secretAccessKeyKey }}}}
{{- end }}
{{- end }}{{ end }}
{{- end -}}

{{/* s3://bucket/prefix?endpoint=…&region=… from artifacts.s3 (no credentials in it). */}}
{{- define "rara.s3Url" -}}
{{- $q := list -}}
{{- if .endpoint }}{{ $q = append $q (printf "endpoint=%s" .endpoint) }}{{ end -}}
{{- if .region }}{{ $q = append $q (printf "region=%s" .region) }}{{ end -}}
s3://{{ .bucket }}/{{ .prefix | default "" | trimAll "/" }}{{ if $q }}?{{ join "&" $q }}{{ end }}
{{- end -}}
