{{/*
Shared definitions: names, labels, image, ServiceAccount names, the managed namespaces, the resolved
feature gates (host-managed IMEX), the DeviceClass API version and environment merging.
*/}}

{{/* Chart name (nameOverride), as used in the `<name>-component` label. */}}
{{- define "imexdra.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Prefix of every object name: fullnameOverride, else the release name if it contains the chart name, else `<release>-<name>`. */}}
{{- define "imexdra.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := include "imexdra.name" . }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The driver namespace: namespaceOverride, else the release namespace. */}}
{{- define "imexdra.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride }}
{{- end }}

{{/* Labels on every object. */}}
{{- define "imexdra.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "imexdra.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: imexdra
{{- end }}

{{/* Selector labels of one component; call with (dict "context" $ "component" "controller"). */}}
{{- define "imexdra.selectorLabels" -}}
{{- if .context.Values.selectorLabelsOverride -}}
{{ toYaml .context.Values.selectorLabelsOverride }}
{{- else -}}
app.kubernetes.io/name: {{ include "imexdra.name" .context }}
app.kubernetes.io/instance: {{ .context.Release.Name }}
{{- end }}
app.kubernetes.io/component: {{ .component }}
{{ include "imexdra.name" .context }}-component: {{ .component }}
{{- end }}

{{/* Labels of a component's pods: its selector labels plus the common labels (no duplicate keys). */}}
{{- define "imexdra.podLabels" -}}
{{- $selector := include "imexdra.selectorLabels" . | fromYaml }}
{{- merge $selector (include "imexdra.labels" .context | fromYaml) | toYaml }}
{{- end }}

{{/* The component image: repository:tag, the tag defaulting to the chart's appVersion; with
image.digest, repository:tag@digest, which runtimes pull by the digest alone (the tag stays for
people). The controller hands the same reference to every IMEX daemon DaemonSet (IMAGE_NAME). */}}
{{- define "imexdra.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- with .Values.image.digest }}@{{ . }}{{ end }}
{{- end }}

{{/* Base name of the controller and kubelet-plugin ServiceAccounts. */}}
{{- define "imexdra.serviceAccountName" -}}
{{- default (printf "%s-service-account" (include "imexdra.fullname" .)) .Values.serviceAccount.name }}
{{- end }}

{{/* ServiceAccount of the daemon pods: fixed, the controller writes it into every daemon DaemonSet. */}}
{{- define "imexdra.daemonServiceAccountName" -}}
compute-domain-daemon-service-account
{{- end }}

{{/* Lease the controllers elect a leader with. */}}
{{- define "imexdra.leaseName" -}}
{{- printf "%s-controller" (include "imexdra.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Namespaces the controller manages daemon objects in, as a JSON list: the driver namespace, then each
name of ADDITIONAL_NAMESPACES in controller.containers.computeDomain.env (commas and/or spaces, as the
controller splits it), de-duplicated. Use with fromJsonArray.
*/}}
{{- define "imexdra.managedNamespaces" -}}
{{- $namespaces := list (include "imexdra.namespace" .) }}
{{- range .Values.controller.containers.computeDomain.env }}
{{- if and (eq .name "ADDITIONAL_NAMESPACES") .value }}
{{- range splitList "," (.value | replace " " ",") }}
{{- if trim . }}
{{- $namespaces = append $namespaces (trim .) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- $namespaces | uniq | toJson }}
{{- end }}

{{/*
Whether host-managed IMEX is on ("true" or ""), resolved as the binaries resolve FEATURE_GATES:
HostManagedIMEX, else its deprecated alias HostManagedIMEXDaemon, else AllAlpha (it is an alpha gate),
else off. resources.computeDomains.imex.mode=hostManaged requires it (validation.yaml).
*/}}
{{- define "imexdra.hostManaged" -}}
{{- $gates := .Values.featureGates | default dict }}
{{- $on := false }}
{{- if hasKey $gates "AllAlpha" }}{{ $on = index $gates "AllAlpha" }}{{ end }}
{{- if hasKey $gates "HostManagedIMEXDaemon" }}{{ $on = index $gates "HostManagedIMEXDaemon" }}{{ end }}
{{- if hasKey $gates "HostManagedIMEX" }}{{ $on = index $gates "HostManagedIMEX" }}{{ end }}
{{- if $on }}true{{ end }}
{{- end }}

{{/*
A gate's effective value as the binaries resolve it ("true" or ""): the explicit value, else AllAlpha or
AllBeta for its stage, else its default. Call with (dict "context" $ "gate" "Name" "stage" "Beta" "default" true).
*/}}
{{- define "imexdra.gate" -}}
{{- $gates := .context.Values.featureGates | default dict }}
{{- $on := .default }}
{{- $all := printf "All%s" .stage }}
{{- if hasKey $gates $all }}{{ $on = index $gates $all }}{{ end }}
{{- if hasKey $gates .gate }}{{ $on = index $gates .gate }}{{ end }}
{{- if $on }}true{{ end }}
{{- end }}

{{/* Whether daemons publish membership in ComputeDomainCliques ("true" or ""): driver-managed with the ComputeDomainCliques gate on. */}}
{{- define "imexdra.cliques" -}}
{{- if and (not (include "imexdra.hostManaged" .)) (include "imexdra.gate" (dict "context" . "gate" "ComputeDomainCliques" "stage" "Beta" "default" true)) }}true{{ end }}
{{- end }}

{{/*
Whether the controller decides binding conditions ("true" or ""): gate ComputeDomainBindingConditions
(ours, alpha, default off; AllAlpha sets it), in either IMEX mode (docs/binding-conditions.md).
*/}}
{{- define "imexdra.bindingConditions" -}}
{{- include "imexdra.gate" (dict "context" . "gate" "ComputeDomainBindingConditions" "stage" "Alpha" "default" false) }}
{{- end }}

{{/* FEATURE_GATES as upstream renders it: Name=value for each gate in name order, trailing comma. */}}
{{- define "imexdra.featureGatesEnv" -}}
{{- range $name, $value := .Values.featureGates }}{{ $name }}={{ $value }},{{ end }}
{{- end }}

{{/* apiVersion of the DeviceClasses: resourceApiVersion, else the newest resource.k8s.io the cluster serves. */}}
{{- define "imexdra.resourceApiVersion" -}}
{{- if .Values.resourceApiVersion }}
{{- .Values.resourceApiVersion }}
{{- else if .Capabilities.APIVersions.Has "resource.k8s.io/v1" }}
{{- "resource.k8s.io/v1" }}
{{- else if .Capabilities.APIVersions.Has "resource.k8s.io/v1beta2" }}
{{- "resource.k8s.io/v1beta2" }}
{{- else if .Capabilities.APIVersions.Has "resource.k8s.io/v1beta1" }}
{{- "resource.k8s.io/v1beta1" }}
{{- else }}
{{- fail "the cluster serves no resource.k8s.io API (Dynamic Resource Allocation); imexdra needs Kubernetes >= 1.34" }}
{{- end }}
{{- end }}

{{/*
A container's env as YAML: the chart's entries (a list of EnvVar dicts) minus those the user's list
names again, then the user's entries. Duplicate names would make server-side apply reject the object.
Call with (dict "chart" $list "user" $userList).
*/}}
{{- define "imexdra.mergeEnv" -}}
{{- $userNames := list }}
{{- range .user }}{{ $userNames = append $userNames .name }}{{ end }}
{{- $merged := list }}
{{- range .chart }}
{{- if not (has .name $userNames) }}{{ $merged = append $merged . }}{{ end }}
{{- end }}
{{- concat $merged .user | toYaml }}
{{- end }}

{{/* The TCP port of a "[host]:port" endpoint, or "" when there is none. */}}
{{- define "imexdra.endpointPort" -}}
{{- regexFind "[0-9]+$" . }}
{{- end }}

{{/* EnvVar from the downward API. Call with (list "NAME" "field.path"). */}}
{{- define "imexdra.fieldEnv" -}}
{{- dict "name" (index . 0) "valueFrom" (dict "fieldRef" (dict "fieldPath" (index . 1))) | toJson }}
{{- end }}
