{{/* Names: release-chart, shortened to 63 characters (DNS labels). */}}
{{- define "moat.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "moat.fullname" -}}
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

{{/* A component's object name: fullname-component, 63 characters at most. */}}
{{- define "moat.component" -}}
{{- printf "%s-%s" (include "moat.fullname" .root | trunc (int (sub 62 (len .component))) | trimSuffix "-") .component -}}
{{- end -}}

{{- define "moat.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "moat.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: moat
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Selector labels of one component: {{ include "moat.selectorLabels" (dict "root" . "component" "agent") }} */}}
{{- define "moat.selectorLabels" -}}
app.kubernetes.io/name: {{ include "moat.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "moat.componentLabels" -}}
{{ include "moat.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "moat.image" -}}
{{- printf "%s:%s" .image.repository (default .root.Chart.AppVersion .image.tag) -}}
{{- end -}}

{{- define "moat.secretName" -}}
{{- default (include "moat.component" (dict "root" . "component" "secrets")) .Values.secrets.existingSecret -}}
{{- end -}}

{{- define "moat.serviceAccountName" -}}
{{- if .root.Values.serviceAccount.create -}}
{{- include "moat.component" . -}}
{{- else -}}
default
{{- end -}}
{{- end -}}

{{/* The etcd client URLs the controller uses: the bundled members or the external ones. */}}
{{- define "moat.etcdEndpoints" -}}
{{- $out := list -}}
{{- if .Values.etcd.enabled -}}
{{- $svc := include "moat.component" (dict "root" . "component" "etcd") -}}
{{- range $i := until (int .Values.etcd.replicas) -}}
{{- $out = append $out (printf "http://%s-%d.%s.%s.svc:2379" $svc $i $svc $.Release.Namespace) -}}
{{- end -}}
{{- else -}}
{{- $out = .Values.etcd.externalEndpoints -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* Rendering fails, naming the fix, on combinations that cannot work. */}}
{{- define "moat.validate" -}}
{{- $c := .Values.controller -}}
{{- if and (gt (int $c.replicas) 1) (ne $c.store "etcd") -}}
{{- fail (printf "controller.replicas=%d needs controller.store=etcd: SQLite has one writer. Set controller.store=etcd with etcd.enabled=true (a bundled 3-member etcd) or etcd.externalEndpoints, or set controller.replicas=1." (int $c.replicas)) -}}
{{- end -}}
{{- if and (eq $c.store "etcd") (not .Values.etcd.enabled) (empty .Values.etcd.externalEndpoints) -}}
{{- fail "controller.store=etcd needs an etcd: set etcd.enabled=true (bundled) or etcd.externalEndpoints (your own)." -}}
{{- end -}}
{{- if and .Values.etcd.enabled (not (empty .Values.etcd.externalEndpoints)) -}}
{{- fail "etcd.enabled=true and etcd.externalEndpoints are both set: choose one (clear etcd.externalEndpoints to use the bundled etcd)." -}}
{{- end -}}
{{- if and .Values.etcd.enabled (ne $c.store "etcd") -}}
{{- fail "etcd.enabled=true but controller.store is not etcd: set controller.store=etcd, or etcd.enabled=false." -}}
{{- end -}}
{{- if and .Values.etcd.enabled (eq (mod (int .Values.etcd.replicas) 2) 0) -}}
{{- fail (printf "etcd.replicas=%d: use an odd number (3 or 5); an even one tolerates no more failures than one fewer." (int .Values.etcd.replicas)) -}}
{{- end -}}
{{- range .Values.agent.profiles -}}
{{- if and .policy (not (hasKey $.Values.agent.policies .policy)) -}}
{{- fail (printf "agent.profiles %q names policy %q, which agent.policies does not define: add it there or remove the profile's policy." .name .policy) -}}
{{- end -}}
{{- if and .root (not $.Values.agent.rootfsHostPath) -}}
{{- fail (printf "agent.profiles %q has a root but agent.rootfsHostPath is empty: set agent.rootfsHostPath to the nodes' directory of roots." .name) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* policy/v1 from Kubernetes 1.21; policy/v1beta1 before (the chart supports 1.20). */}}
{{- define "moat.pdbApiVersion" -}}
{{- if semverCompare ">=1.21-0" .Capabilities.KubeVersion.Version -}}
policy/v1
{{- else -}}
policy/v1beta1
{{- end -}}
{{- end -}}
