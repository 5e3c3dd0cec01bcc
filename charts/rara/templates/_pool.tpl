{{/*
What every scaled pool has besides its Deployment: a metrics Service, a PodDisruptionBudget
and the WorkerPool the operator scales it by.
Call with (dict "root" $ "name" <deployment name> "component" <label> "pool" <pool values>).
*/}}
{{- define "rara.poolExtras" -}}
{{- $root := .root }}
apiVersion: v1
kind: Service
metadata:
  name: {{ .name }}-metrics
  labels: {{- include "rara.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
spec:
  selector: {{- include "rara.selector" (dict "root" $root "component" .component) | nindent 4 }}
  ports:
    - {name: metrics, port: {{ $root.Values.metrics.port }}, targetPort: metrics}
    {{- range $k := untilStep 1 (int (include "rara.poolProcesses" .pool)) 1 }}
    - {name: metrics-{{ $k }}, port: {{ add $root.Values.metrics.port $k }}, targetPort: metrics-{{ $k }}}
    {{- end }}
{{- if $root.Values.podDisruptionBudget.enabled }}
---
# maxUnavailable, not minAvailable: a pool the operator scaled to zero must not block drains.
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ .name }}
  labels: {{- include "rara.labels" $root | nindent 4 }}
spec:
  maxUnavailable: {{ $root.Values.podDisruptionBudget.maxUnavailable }}
  selector:
    matchLabels: {{- include "rara.selector" (dict "root" $root "component" .component) | nindent 6 }}
{{- end }}
---
apiVersion: rara.dev/v1alpha1
kind: WorkerPool
metadata:
  name: {{ .name }}
  labels: {{- include "rara.labels" $root | nindent 4 }}
spec:
  deploymentName: {{ .name }}
  capabilities: {{- toYaml .pool.capabilities | nindent 4 }}
  {{- /* hasKey, not `default`: 0 is a meaningful value here (max 0 switches a pool off) */}}
  minReplicas: {{ ternary .pool.minReplicas 0 (hasKey .pool "minReplicas") }}
  maxReplicas: {{ ternary .pool.maxReplicas 10 (hasKey .pool "maxReplicas") }}
  targetBacklogPerReplica: {{ ternary .pool.targetBacklogPerReplica 10 (hasKey .pool "targetBacklogPerReplica") }}
  cooldownSeconds: {{ ternary .pool.cooldownSeconds 300 (hasKey .pool "cooldownSeconds") }}
{{- end -}}

{{/*
The worker processes of each pod of a pool: `processes`, else its settings' `processes`, else 1
(a worker group above 1: one supervisor holding one LISTEN connection for them all).
*/}}
{{- define "rara.poolProcesses" -}}
{{- .processes | default ((.settings | default dict).processes | default 1) -}}
{{- end -}}

{{- define "rara.placement" -}}
{{- with .nodeSelector }}
nodeSelector: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity: {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
