{{/* Chart name, truncated to 63 chars (DNS label). */}}
{{- define "phalanx.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: release-chart, or the release name when it already contains the chart name. */}}
{{- define "phalanx.fullname" -}}
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

{{- define "phalanx.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "phalanx.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: phalanx
{{- end }}

{{- define "phalanx.selectorLabels" -}}
app.kubernetes.io/name: {{ include "phalanx.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "phalanx.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "phalanx.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The Lease "namespace/name" this release's scheduler contends for: named after scheduler.name in
leaderElection.namespace, so that every release of one scheduler name elects one leader (crates/phalanx/src/leader.rs;
kube-scheduler keys its Lease the same way). Empty with leader election off.
*/}}
{{- define "phalanx.lease" -}}
{{- if .Values.leaderElection.enabled }}
{{- printf "%s/%s" .Values.leaderElection.namespace .Values.scheduler.name }}
{{- end }}
{{- end }}

{{/* Name of the leader-election Role and RoleBinding: they live in the Lease namespace, which releases share. */}}
{{- define "phalanx.leaseRoleName" -}}
{{- printf "%s-%s-leader-election" (include "phalanx.fullname" .) .Release.Namespace }}
{{- end }}

{{/*
What a live Deployment (the argument) schedules, from its phalanx container's arguments, as
"<scheduler name>|<lease namespace/name, or empty without leader election>", with the binary's defaults for flags it
does not pass (lease name = scheduler name, namespace kube-system; `phalanx run --help`). Empty for a Deployment that
runs no phalanx scheduler. Read by NOTES.txt and the Deployment's update strategy.
*/}}
{{- define "phalanx.deploymentScheduler" -}}
{{- $sched := "" }}{{- $elect := false }}{{- $ns := "kube-system" }}{{- $name := "" }}
{{- range .spec.template.spec.containers }}
{{- if has "run" (.args | default list) }}
{{- range .args }}
{{- if hasPrefix "--scheduler-name=" . }}{{- $sched = trimPrefix "--scheduler-name=" . }}{{- end }}
{{- if eq . "--leader-elect=true" "--leader-elect" }}{{- $elect = true }}{{- end }}
{{- if hasPrefix "--leader-elect-lease-namespace=" . }}{{- $ns = trimPrefix "--leader-elect-lease-namespace=" . }}{{- end }}
{{- if hasPrefix "--leader-elect-lease-name=" . }}{{- $name = trimPrefix "--leader-elect-lease-name=" . }}{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- if $sched }}
{{- printf "%s|%s" $sched (ternary (printf "%s/%s" $ns (default $sched $name)) "" $elect) }}
{{- end }}
{{- end }}
