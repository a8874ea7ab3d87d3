{{/*
The labels Helm's own conventions add to every object (https://helm.sh/docs/chart_best_practices/labels/), on
top of the manifests' app.kubernetes.io/name and part-of. Only on objects' metadata, never in a selector or a pod
template: an install made with kustomize is adopted without a rollout and without a selector change
(docs/helm.md, "Moving a kustomize install under Helm"). tests/deploy/test_chart.py lists them as the only
difference from manifests/.
*/}}
{{- define "colocation.helmLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{/* The metadata.labels of a hand-written object: its name label, part-of, and Helm's. */}}
{{- define "colocation.labels" -}}
{{- $root := index . 0 -}}
{{- with index . 1 }}
app.kubernetes.io/name: {{ . }}
{{- end }}
app.kubernetes.io/part-of: colocation-webhook
{{ include "colocation.helmLabels" $root }}
{{- end -}}

{{/* The one image of both programs: [imageRepositoryHost/]repository:tag[@digest]; tag defaults to appVersion. */}}
{{- define "colocation.image" -}}
{{- $repo := .Values.image.repository -}}
{{- with .Values.imageRepositoryHost }}{{ $repo = printf "%s/%s" (trimSuffix "/" .) $repo }}{{ end -}}
{{- $ref := printf "%s:%s" $repo (.Values.image.tag | default .Chart.AppVersion) -}}
{{- with .Values.image.digest }}{{ $ref = printf "%s@%s" $ref . }}{{ end -}}
{{- $ref -}}
{{- end -}}

{{- define "colocation.imagePullSecrets" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
{{- range . }}
  - name: {{ . }}
{{- end }}
{{- end }}
{{- end -}}

{{/*
A file of files/, each a copy of manifests/ at the same path (tests/deploy/test_chart.py holds them byte-equal),
rendered object by object with Helm's labels added and, given, annotations. One source for the objects no value
changes: manifests/.
  include "colocation.file" (list $ "files/base/webhook-rbac.yaml" (dict))
*/}}
{{- define "colocation.file" -}}
{{- $root := index . 0 -}}
{{- $path := index . 1 -}}
{{- $annotations := index . 2 -}}
{{- $text := $root.Files.Get $path -}}
{{- if not $text }}{{ fail (printf "%s: missing from the chart" $path) }}{{ end -}}
{{- range $doc := splitList "\n---\n" $text }}
{{- $obj := fromYaml $doc }}
{{- if hasKey $obj "Error" }}{{ fail (printf "%s: %s" $path $obj.Error) }}{{ end }}
{{- if $obj }}
{{- $meta := $obj.metadata }}
{{- $_ := set $meta "labels" (mustMerge (include "colocation.helmLabels" $root | fromYaml) ($meta.labels | default dict)) }}
{{- $ann := mustMerge (dict) ($meta.annotations | default dict) $annotations }}
{{- if and (eq $obj.kind "ServiceAccount") $root.Values.serviceAccount.annotations }}
{{- $ann = mustMerge $ann $root.Values.serviceAccount.annotations }}
{{- end }}
{{- if $ann }}{{ $_ := set $meta "annotations" $ann }}{{ end }}
---
# Source: {{ $path }}
{{ toPrettyJson $obj }}
{{- end }}
{{- end }}
{{- end -}}

{{/* Koordinator's objects outlive the release: `helm uninstall` leaves them, as `kubectl delete -k manifests/`
does (docs/install.md, "Uninstall"); deleting the CRD would delete every ClusterColocationProfile. */}}
{{- define "colocation.keep" -}}
{{- dict "helm.sh/resource-policy" "keep" | toJson -}}
{{- end -}}
