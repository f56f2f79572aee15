{{/*
The gateway objects' name: fullnameOverride, else the release name, else
"leasegate" when the release name contains it (so `helm install leasegate`
names everything as the kustomize base does). A DNS label: 63 characters.
*/}}
{{- define "leasegate.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels every object carries. */}}
{{- define "leasegate.commonLabels" -}}
app.kubernetes.io/part-of: leasegate
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The gateway pods' selector: the same labels as the kustomize base. */}}
{{- define "leasegate.selectorLabels" -}}
app.kubernetes.io/name: leasegate
app.kubernetes.io/component: gateway
{{- end -}}

{{/* Labels of the gateway's objects. */}}
{{- define "leasegate.labels" -}}
app.kubernetes.io/name: leasegate
app.kubernetes.io/component: gateway
app.kubernetes.io/version: {{ include "leasegate.imageTag" . | replace "+" "_" | trunc 63 | trimSuffix "-" | quote }}
{{ include "leasegate.commonLabels" . }}
{{- end -}}

{{- define "leasegate.imageTag" -}}
{{- .Values.image.tag | default .Chart.AppVersion -}}
{{- end -}}

{{/* The gateway image: repository:tag, the tag defaulting to appVersion. */}}
{{- define "leasegate.image" -}}
{{- printf "%s:%s" .Values.image.repository (include "leasegate.imageTag" .) -}}
{{- end -}}

{{/*
The shards that run in this chart (no endpoints), as a JSON list of names:
  {{- range (include "leasegate.inChartShards" . | fromJsonArray) }}
*/}}
{{- define "leasegate.inChartShards" -}}
{{- $names := list -}}
{{- range .Values.shards -}}
{{- if not .endpoints -}}
{{- $names = append $names .name -}}
{{- end -}}
{{- end -}}
{{- toJson $names -}}
{{- end -}}

{{/*
The --etcd list: NAME=URL,URL… per shard, in order; an in-chart shard's URLs
are its members on the client port. Fails on a repeated name, and on etcd
TLS with in-chart (plain HTTP) clusters.
*/}}
{{- define "leasegate.etcdList" -}}
{{- $seen := dict -}}
{{- $out := list -}}
{{- range .Values.shards -}}
{{- if hasKey $seen .name -}}
{{- fail (printf "shards: %q is listed twice; every shard needs its own name" .name) -}}
{{- end -}}
{{- $_ := set $seen .name true -}}
{{- $urls := .endpoints -}}
{{- if not $urls -}}
{{- if $.Values.etcdTLS.enabled -}}
{{- fail (printf "shards: %q has no endpoints, so it runs in this chart over plain HTTP; etcdTLS.enabled needs external (https://) shards" .name) -}}
{{- end -}}
{{- $urls = list -}}
{{- $shard := .name -}}
{{- range $i := until (int $.Values.etcd.replicas) -}}
{{- $urls = append $urls (printf "http://%s-%d.%s:2379" $shard $i $shard) -}}
{{- end -}}
{{- end -}}
{{- $out = append $out (printf "%s=%s" .name (join "," $urls)) -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}
