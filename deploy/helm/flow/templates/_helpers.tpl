{{/*
flow.namespace is namespaceOverride (upstream's) or the release's namespace.
*/}}
{{- define "flow.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride -}}
{{- end -}}

{{/* flow.selectorLabels picks the pods of this release. */}}
{{- define "flow.selectorLabels" -}}
app.kubernetes.io/name: flow
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* flow.labels are on every object: global.labels, with the chart's over them. */}}
{{- define "flow.labels" -}}
{{- $labels := deepCopy (default dict .Values.global.labels) -}}
{{- $_ := set $labels "app.kubernetes.io/name" "flow" -}}
{{- $_ = set $labels "app.kubernetes.io/instance" .Release.Name -}}
{{- $_ = set $labels "app.kubernetes.io/version" (.Chart.AppVersion | toString) -}}
{{- $_ = set $labels "app.kubernetes.io/managed-by" .Release.Service -}}
{{- $_ = set $labels "helm.sh/chart" (printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_") -}}
{{- toYaml $labels -}}
{{- end -}}

{{/* flow.imageTag is images.flow.tag, else global.image.tag, else appVersion. */}}
{{- define "flow.imageTag" -}}
{{- .Values.images.flow.tag | default .Values.global.image.tag | default .Chart.AppVersion -}}
{{- end -}}

{{/*
flow.image is upstream's rule: images.flow.repository, or
<global.image.repository>/nico-flow; then the tag, or the digest.
*/}}
{{- define "flow.image" -}}
{{- $repo := .Values.images.flow.repository -}}
{{- if not $repo -}}
{{- if not .Values.global.image.repository -}}
{{- fail "images.flow.repository (or global.image.repository) must name Flow's image" -}}
{{- end -}}
{{- $repo = printf "%s/nico-flow" (trimSuffix "/" .Values.global.image.repository) -}}
{{- end -}}
{{- if .Values.images.flow.digest -}}
{{- printf "%s@%s" $repo .Values.images.flow.digest -}}
{{- else -}}
{{- printf "%s:%s" $repo (include "flow.imageTag" .) -}}
{{- end -}}
{{- end -}}

{{/* flow.dataKeySecret is the Secret holding the data-encryption key. */}}
{{- define "flow.dataKeySecret" -}}
{{- default "flow-data-encryption-key" .Values.dataEncryption.key.existingSecret -}}
{{- end -}}

{{/* flow.dbCertPath is DB_CERT_PATH: the db-tls Secret's CA, or database.certPath. */}}
{{- define "flow.dbCertPath" -}}
{{- if .Values.database.tls.existingSecret -}}
/var/run/secrets/flow-db-tls/ca.crt
{{- else -}}
{{- .Values.database.certPath -}}
{{- end -}}
{{- end -}}

{{/*
flow.env is the environment of the flow container and of the migrate init
container: upstream's variables with upstream's values, then this chart's,
then extraEnv.flow.
*/}}
{{- define "flow.env" -}}
- name: FLOW_ENV
  value: {{ .Values.flowEnv | quote }}
- name: DB_NAME
  value: {{ .Values.database.flow.name | quote }}
- name: DB_USER
  valueFrom:
    secretKeyRef:
      name: {{ .Values.database.flow.credentialsSecret }}
      key: {{ .Values.database.flow.usernameKey }}
- name: DB_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ .Values.database.flow.credentialsSecret }}
      key: {{ .Values.database.flow.passwordKey }}
- name: DB_HOST
  value: {{ .Values.database.host | quote }}
- name: DB_PORT
  value: {{ .Values.database.port | quote }}
{{- with include "flow.dbCertPath" . }}
- name: DB_CERT_PATH
  value: {{ . | quote }}
{{- end }}
{{- with .Values.nicoCoreApi.url }}
- name: NICO_CORE_API_URL
  value: {{ . | quote }}
{{- end }}
- name: FLOW_DATA_ENCRYPTION_KEY_PATH
  value: /var/run/secrets/flow-data-encryption/encryption-key
- name: FLOW_LISTEN_ADDR
  value: {{ printf ":%d" (int .Values.ports.flow) | quote }}
- name: FLOW_ADMIN_LISTEN_ADDR
  value: {{ .Values.adminListenAddr | quote }}
- name: FLOW_SHUTDOWN_TIMEOUT
  value: {{ printf "%ds" (int .Values.shutdownTimeoutSeconds) | quote }}
{{- with .Values.extraEnv.flow }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* flow.volumeMounts are the flow container's (and the init container's) mounts. */}}
{{- define "flow.volumeMounts" -}}
- name: spiffe
  mountPath: /var/run/secrets/spiffe.io
  readOnly: true
- name: flow-config-files
  mountPath: /etc/flow
  readOnly: true
- name: data-encryption-key
  mountPath: /var/run/secrets/flow-data-encryption
  readOnly: true
{{- if .Values.database.tls.existingSecret }}
- name: db-tls
  mountPath: /var/run/secrets/flow-db-tls
  readOnly: true
{{- end }}
- name: tmp
  mountPath: /tmp
{{- end -}}

{{/* flow.containerSecurityContext: the chart's, with containerSecurityContext merged over it. */}}
{{- define "flow.containerSecurityContext" -}}
{{- $base := dict "allowPrivilegeEscalation" false "readOnlyRootFilesystem" true "runAsNonRoot" true "capabilities" (dict "drop" (list "ALL")) "seccompProfile" (dict "type" "RuntimeDefault") -}}
{{- $merged := mustMergeOverwrite $base (deepCopy .Values.containerSecurityContext) -}}
{{- $_ := set $merged "allowPrivilegeEscalation" false -}}
{{- toYaml $merged -}}
{{- end -}}

{{/* flow.checkDuration fails unless $value is a nonzero Go duration with a unit. */}}
{{- define "flow.checkDuration" -}}
{{- $name := index . 0 -}}{{- $value := toString (index . 1) -}}
{{- if not (regexMatch "^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$" $value) -}}
{{- fail (printf "%s must be a Go duration with a unit, such as 1m or 90s, got %q" $name $value) -}}
{{- end -}}
{{- if regexMatch "^(0+(\\.0+)?(ns|us|µs|ms|s|m|h))+$" $value -}}
{{- fail (printf "%s must not be zero, got %q" $name $value) -}}
{{- end -}}
{{- end -}}

{{/* flow.gracePeriod is terminationGracePeriodSeconds, above the preStop sleep plus FLOW_SHUTDOWN_TIMEOUT. */}}
{{- define "flow.gracePeriod" -}}
{{- $floor := add (int .Values.preStopSleepSeconds) (int .Values.shutdownTimeoutSeconds) -}}
{{- if not .Values.terminationGracePeriodSeconds -}}
{{- add $floor 15 -}}
{{- else if le (int .Values.terminationGracePeriodSeconds) $floor -}}
{{- fail (printf "terminationGracePeriodSeconds (%d) must exceed preStopSleepSeconds + shutdownTimeoutSeconds (%d): the kubelet would kill Flow before it hands its work off" (int .Values.terminationGracePeriodSeconds) $floor) -}}
{{- else -}}
{{- int .Values.terminationGracePeriodSeconds -}}
{{- end -}}
{{- end -}}
