{{/* Names. */}}
{{- define "svc-hub.name" -}}
{{- include "svc-hub.checkNames" . }}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "svc-hub.fullname" -}}
{{- include "svc-hub.checkNames" . }}
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

{{/*
Stops the render at a nameOverride or fullnameOverride that is no DNS label (lower-case letters,
digits and '-'): both are written into object names and label values unquoted, past
helm --skip-schema-validation too.
*/}}
{{- define "svc-hub.checkNames" -}}
{{- range $path := list "nameOverride" "fullnameOverride" }}
{{- $v := index $.Values $path }}
{{- if and $v (not (and (kindIs "string" $v) (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" $v))) }}
{{- fail (printf "%s is refused: %s is no DNS label (lower-case letters, digits and '-', a letter or digit at each end), what object names and labels take" $path (toJson $v)) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
A whole number of the values, rendered as one: an integer, or a string of digits (helm --set-string).
Anything else stops the render, past helm --skip-schema-validation too, naming the value path: a
value written unquoted must not carry a newline or YAML of its own into the manifest. Arguments: path
(the value path the message names), value.
*/}}
{{- define "svc-hub.int" -}}
{{- $v := .value }}
{{- $ok := or (kindIs "int" $v) (kindIs "int64" $v) (and (kindIs "float64" $v) (eq $v (float64 (int64 $v)))) (and (kindIs "string" $v) (regexMatch "^(0|[1-9][0-9]{0,17})$" $v)) }}
{{- if or (not $ok) (lt (int64 $v) 0) }}
{{- fail (printf "%s is refused: %s is no whole number of 0 or more" .path (toJson $v)) }}
{{- end }}
{{- int64 $v }}
{{- end }}

{{/*
A value of a fixed set (an enum of the Kubernetes API), rendered quoted; anything else stops the
render, past helm --skip-schema-validation too, naming the value path. Arguments: path, value,
allowed (the list).
*/}}
{{- define "svc-hub.enum" -}}
{{- if not (and (kindIs "string" .value) (has .value .allowed)) }}
{{- fail (printf "%s is refused: %s is none of %s" .path (toJson .value) (join ", " .allowed)) }}
{{- end }}
{{- .value | quote }}
{{- end }}

{{/* "<fullname>-<component>", within the 63 characters of a label value. */}}
{{- define "svc-hub.componentName" -}}
{{- printf "%s-%s" (include "svc-hub.fullname" .root | trunc (int (sub 62 (len .component))) | trimSuffix "-") .component }}
{{- end }}

{{- define "svc-hub.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "svc-hub.name" . | quote }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: svc-hub
{{- end }}

{{/* Labels of one component; its selector labels are a subset. */}}
{{- define "svc-hub.componentLabels" -}}
{{ include "svc-hub.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/*
Stops the render at a <role>.podLabels key the chart sets on the pods itself, past
helm --skip-schema-validation too: written twice in one mapping, the later (the value's) wins, and a
pod whose selector label changed leaves its Deployment's selector (which the API server refuses).
Arguments: path, labels (the value), chart (the chart's labels of the pods).
*/}}
{{- define "svc-hub.checkPodLabels" -}}
{{- range $key, $_ := .labels }}
{{- if hasKey $.chart $key }}
{{- fail (printf "%s is refused: %s is a label the chart sets on the pods itself (%s)" $.path $key (keys $.chart | sortAlpha | join ", ")) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
A Service's name, checked and quoted: a DNS label (lower-case letters, digits and '-', at most 63
characters). Object names of other kinds may hold dots; a Service's may not, so a release name with a
dot (helm takes `hub.prod`) would have stopped the install at the API server, after the migration
hook had run. Argument: the chart context and the name.
*/}}
{{- define "svc-hub.serviceName" -}}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$" .name) }}
{{- fail (printf "the Service name %s is refused: a Service name is a DNS label (lower-case letters, digits and '-', at most 63 characters), which the release name %s does not make: set fullnameOverride" (toJson .name) (toJson .root.Release.Name)) }}
{{- end }}
{{- .name | quote }}
{{- end }}

{{- define "svc-hub.selectorLabels" -}}
app.kubernetes.io/name: {{ include "svc-hub.name" .root | quote }}
app.kubernetes.io/instance: {{ .root.Release.Name | quote }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* image.pullPolicy, checked and quoted. Argument: the chart context. */}}
{{- define "svc-hub.pullPolicy" -}}
{{- include "svc-hub.enum" (dict "path" "image.pullPolicy" "value" .Values.image.pullPolicy "allowed" (list "Always" "IfNotPresent" "Never")) }}
{{- end }}

{{- define "svc-hub.image" -}}
{{- $image := .Values.image }}
{{- if $image.digest }}
{{- printf "%s@%s" $image.repository $image.digest }}
{{- else }}
{{- printf "%s:%s" $image.repository (default .Chart.AppVersion $image.tag) }}
{{- end }}
{{- end }}

{{/*
Environment shared by every role. Credentials only as secretKeyRef: the values never hold them.
*/}}
{{- define "svc-hub.env" -}}
{{- include "svc-hub.checkConfig" . }}
{{- include "svc-hub.checkExtraEnv" (dict "root" . "lists" (list (dict "path" "extraEnv" "entries" .Values.extraEnv))) }}
{{- $v := .Values -}}
- name: SVC_PROFILE
  value: {{ $v.profile | quote }}
- name: SVC_LOG_LEVEL
  value: {{ $v.logLevel | quote }}
- name: SVC_HTTP_HOST
  value: "0.0.0.0"
- name: SVC_HTTP_PORT
  value: {{ include "svc-hub.int" (dict "path" "httpPort" "value" $v.httpPort) | quote }}
# The root filesystem is read-only; /tmp is an emptyDir.
- name: SVC_DATA_DIR
  value: /tmp/svc
# CronJobs made by the operator fire scheduled runs in Kubernetes.
- name: SVC_SCHEDULER_ENABLED
  value: "false"
- name: SVC_MIGRATE_ON_START
  value: {{ not $v.migrations.job.enabled | quote }}
- name: SVC_OIDC_ISSUER
  value: {{ required "oidc.issuer is required: the URL of the identity provider whose tokens the hub accepts (--set oidc.issuer=https://…)" $v.oidc.issuer | quote }}
{{- with $v.oidc.audience }}
- name: SVC_OIDC_AUDIENCE
  value: {{ . | quote }}
{{- end }}
{{- with $v.oidc.jwksUri }}
- name: SVC_OIDC_JWKS_URI
  value: {{ . | quote }}
{{- end }}
{{- with $v.oidc.tenantClaim }}
- name: SVC_OIDC_TENANT_CLAIM
  value: {{ . | quote }}
{{- end }}
- name: DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ $v.database.existingSecret | quote }}
      key: {{ $v.database.urlKey | quote }}
{{- with $v.database.appUrlKey }}
- name: SVC_DATASOURCE_APP_URL
  valueFrom:
    secretKeyRef:
      name: {{ $v.database.existingSecret | quote }}
      key: {{ . | quote }}
{{- end }}
{{- with $v.database.workerUrlKey }}
- name: SVC_DATASOURCE_WORKER_URL
  valueFrom:
    secretKeyRef:
      name: {{ $v.database.existingSecret | quote }}
      key: {{ . | quote }}
{{- end }}
- name: SVC_SECRET_MASTER_KEY
  valueFrom:
    secretKeyRef:
      name: {{ $v.masterKey.existingSecret | quote }}
      key: {{ $v.masterKey.key | quote }}
{{- with $v.masterKey.previousKeysKey }}
- name: SVC_SECRET_PREVIOUS_MASTER_KEYS
  valueFrom:
    secretKeyRef:
      name: {{ $v.masterKey.existingSecret | quote }}
      key: {{ . | quote }}
{{- end }}
# Identity and namespace of the pod: the Lease holder and the Lease namespace of the leader election.
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
{{- if not (hasKey ($v.config | default dict) "svc.leader.lease-name") }}
# The dispatchers' Lease, per release: two releases in one namespace never share a leader.
- name: SVC_LEADER_LEASE_NAME
  value: {{ include "svc-hub.dispatchLease" . | quote }}
{{- end }}
{{- range $property, $value := $v.config }}
- name: {{ include "svc-hub.envName" $property }}
  value: {{ if kindIs "string" $value }}{{ $value | quote }}{{ else }}{{ $value | toJson | quote }}{{ end }}
{{- end }}
{{- with $v.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The environment variable of a hub property, as the hub reads it: svc.http.port -> SVC_HTTP_PORT. */}}
{{- define "svc-hub.envName" -}}
{{- regexReplaceAll "[^A-Z0-9]" (upper .) "_" }}
{{- end }}

{{/*
Every variable the chart sets itself in some container (svc-hub.env, the operator's componentEnv),
with the variables of the properties whose alias it sets (SVC_DATASOURCE_URL beside DATABASE_URL,
SVC_OPERATOR_CRONJOB_NAMESPACE beside POD_NAMESPACE: the hub reads SVC_A_B_C before an alias), each
with what to do instead of a config entry. test/chart.test.ts fails when the chart renders one missing here.
*/}}
{{- define "svc-hub.chartEnv" -}}
SVC_PROFILE: set the value profile instead
SVC_LOG_LEVEL: set the value logLevel instead
SVC_HTTP_HOST: the chart listens on 0.0.0.0, where the probes and the Services reach the pods
SVC_HTTP_PORT: set the value httpPort instead (the container port, the probes and the Services follow it)
SVC_DATA_DIR: the chart keeps it on the /tmp emptyDir (/tmp/svc), the root filesystem being read-only
SVC_SCHEDULER_ENABLED: the chart turns the in-process schedulers off, the operator's CronJobs fire the scheduled runs
SVC_MIGRATE_ON_START: set the value migrations.job.enabled instead (false migrates at the start of every role)
SVC_OIDC_ISSUER: set the value oidc.issuer instead
SVC_OIDC_AUDIENCE: set the value oidc.audience instead
SVC_OIDC_JWKS_URI: set the value oidc.jwksUri instead
SVC_OIDC_TENANT_CLAIM: set the value oidc.tenantClaim instead
DATABASE_URL: set the values database.existingSecret and database.urlKey instead
SVC_DATASOURCE_URL: set the values database.existingSecret and database.urlKey instead (the chart passes the URL as DATABASE_URL)
SVC_DATASOURCE_APP_URL: set the value database.appUrlKey instead
SVC_DATASOURCE_WORKER_URL: set the value database.workerUrlKey instead
SVC_SECRET_MASTER_KEY: set the values masterKey.existingSecret and masterKey.key instead
SVC_SECRET_PREVIOUS_MASTER_KEYS: set the value masterKey.previousKeysKey instead
POD_NAME: the chart passes the pod's name
POD_NAMESPACE: the chart passes the pod's namespace
SVC_LEADER_LEASE_NAME: set the config key svc.leader.lease-name, spelled so, instead (the chart then names the Leases and grants them by it)
SVC_OPERATOR_NAMESPACE: set the value operator.watchNamespaces instead
SVC_OPERATOR_INSTANCE: set the value operator.instance instead
SVC_OPERATOR_CRONJOB_NAMESPACE: the CronJobs go to the release namespace (POD_NAMESPACE), the only one where the chart grants them
SVC_OPERATOR_RUN_JOB_CONFIGMAP: the chart passes its run-job ConfigMap, the CronJobs' owner (the operator may read that one only)
{{- end }}

{{/*
Stops the render at a config entry that cannot be passed as it is: a value that is no string, number
or boolean; two keys of one variable (svc.a.b and svc.a-b are both SVC_A_B); a key whose variable the
chart sets itself (any spelling: svc.http-port as well as svc.http.port), which would override the
chart's, Kubernetes taking the later of two entries of one name. svc.leader.lease-name itself is
allowed: the chart then leaves out its own SVC_LEADER_LEASE_NAME.
*/}}
{{- define "svc-hub.checkConfig" -}}
{{- $chartEnv := include "svc-hub.chartEnv" . | fromYaml }}
{{- $seen := dict }}
{{- range $property, $value := .Values.config }}
{{- $name := include "svc-hub.envName" $property }}
{{- if not (or (kindIs "string" $value) (kindIs "bool" $value) (kindIs "float64" $value) (kindIs "int64" $value) (kindIs "int" $value)) }}
{{- fail (printf "config key %s is refused: its value %s is no string, number or boolean, what an environment variable (%s) can hold" $property (toJson $value) $name) }}
{{- end }}
{{- if and (hasKey $chartEnv $name) (ne $property "svc.leader.lease-name") }}
{{- fail (printf "config key %s is refused: it would be passed as %s, a variable the chart sets itself (Kubernetes takes the later of two entries of one name, so it would override the chart's): %s" $property $name (get $chartEnv $name)) }}
{{- end }}
{{- if hasKey $seen $name }}
{{- fail (printf "config keys %s and %s are both passed as %s: keep one" (get $seen $name) $property $name) }}
{{- end }}
{{- $_ := set $seen $name $property }}
{{- end }}
{{- end }}

{{/*
Stops the render at an extra environment entry (extraEnv, <role>.env) that cannot be passed as it is,
past helm --skip-schema-validation too (values.schema.json refuses only the names of svc-hub.chartEnv).
Arguments: root (the chart context), lists (the extra lists of one container, in render order: each a
dict of path, the value path the message names, and entries). Refused: a list that is no list; an
entry that is no map or has no name; a name the chart sets itself in any container (svc-hub.chartEnv,
the operator's SVC_OPERATOR_* included), which would override the chart's, Kubernetes taking the later
of two entries of one name; a name a config key is passed as; a name two extra entries of the
container set (the later would override the other unseen).
*/}}
{{- define "svc-hub.checkExtraEnv" -}}
{{- $chartEnv := include "svc-hub.chartEnv" .root | fromYaml }}
{{- $configEnv := dict }}
{{- range $property, $_ := .root.Values.config }}
{{- $_ := set $configEnv (include "svc-hub.envName" $property) $property }}
{{- end }}
{{- $seen := dict }}
{{- range .lists }}
{{- $path := .path }}
{{- if not (or (kindIs "slice" .entries) (kindIs "invalid" .entries)) }}
{{- fail (printf "%s is refused: %s is no list of environment variables (EnvVar objects)" $path (toJson .entries)) }}
{{- end }}
{{- range $i, $entry := .entries }}
{{- $at := printf "%s[%d]" $path $i }}
{{- if not (kindIs "map" $entry) }}
{{- fail (printf "%s is refused: %s is no environment variable (an EnvVar object: name, and value or valueFrom)" $at (toJson $entry)) }}
{{- end }}
{{- $name := $entry.name }}
{{- if not (and (kindIs "string" $name) $name) }}
{{- fail (printf "%s is refused: it has no name (an EnvVar object: name, and value or valueFrom)" $at) }}
{{- end }}
{{- if hasKey $chartEnv $name }}
{{- fail (printf "%s is refused: %s is a variable the chart sets itself (Kubernetes takes the later of two entries of one name, so it would override the chart's): %s" $at $name (get $chartEnv $name)) }}
{{- end }}
{{- if hasKey $configEnv $name }}
{{- fail (printf "%s is refused: %s is also passed by the config key %s (Kubernetes takes the later of two entries of one name, so one would override the other unseen): keep one" $at $name (get $configEnv $name)) }}
{{- end }}
{{- if hasKey $seen $name }}
{{- fail (printf "%s and %s both set %s in one container (Kubernetes takes the later of two entries of one name, so one would override the other unseen): keep one" (get $seen $name) $at $name) }}
{{- end }}
{{- $_ := set $seen $name $at }}
{{- end }}
{{- end }}
{{- end }}

{{- define "svc-hub.probes" -}}
{{- $p := .Values.probes -}}
startupProbe:
  httpGet:
    path: /q/health/live
    port: http
  periodSeconds: {{ include "svc-hub.int" (dict "path" "probes.startup.periodSeconds" "value" $p.startup.periodSeconds) }}
  timeoutSeconds: {{ include "svc-hub.int" (dict "path" "probes.startup.timeoutSeconds" "value" $p.startup.timeoutSeconds) }}
  failureThreshold: {{ include "svc-hub.int" (dict "path" "probes.startup.failureThreshold" "value" $p.startup.failureThreshold) }}
livenessProbe:
  httpGet:
    path: /q/health/live
    port: http
  periodSeconds: {{ include "svc-hub.int" (dict "path" "probes.liveness.periodSeconds" "value" $p.liveness.periodSeconds) }}
  timeoutSeconds: {{ include "svc-hub.int" (dict "path" "probes.liveness.timeoutSeconds" "value" $p.liveness.timeoutSeconds) }}
  failureThreshold: {{ include "svc-hub.int" (dict "path" "probes.liveness.failureThreshold" "value" $p.liveness.failureThreshold) }}
readinessProbe:
  httpGet:
    path: /q/health/ready
    port: http
  periodSeconds: {{ include "svc-hub.int" (dict "path" "probes.readiness.periodSeconds" "value" $p.readiness.periodSeconds) }}
  timeoutSeconds: {{ include "svc-hub.int" (dict "path" "probes.readiness.timeoutSeconds" "value" $p.readiness.timeoutSeconds) }}
  failureThreshold: {{ include "svc-hub.int" (dict "path" "probes.readiness.failureThreshold" "value" $p.readiness.failureThreshold) }}
{{- end }}

{{/*
A role's Deployment. Arguments: root (the chart context), component (apiserver, dispatcher,
operator), role (the svc-hub role), values (the component's values), automountToken; optionally
extraMounts, extraVolumes and extraAnnotations (of the pod).
*/}}
{{- define "svc-hub.deployment" -}}
{{- $root := .root }}
{{- $c := .values }}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "svc-hub.componentName" . }}
  namespace: {{ $root.Release.Namespace | quote }}
  labels:
    {{- include "svc-hub.componentLabels" . | nindent 4 }}
spec:
  replicas: {{ include "svc-hub.int" (dict "path" (printf "%s.replicas" .component) "value" $c.replicas) }}
  revisionHistoryLimit: 5
  selector:
    matchLabels:
      {{- include "svc-hub.selectorLabels" . | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "svc-hub.componentLabels" . | nindent 8 }}
        {{- with $c.podLabels }}
        {{- include "svc-hub.checkPodLabels" (dict "path" (printf "%s.podLabels" $.component) "labels" . "chart" (include "svc-hub.componentLabels" $ | fromYaml)) }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- with (merge (dict) (.extraAnnotations | default dict) $c.podAnnotations) }}
      annotations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
    spec:
      serviceAccountName: {{ include "svc-hub.componentName" . }}
      automountServiceAccountToken: {{ .automountToken }}
      {{- with $c.priorityClassName }}
      priorityClassName: {{ . | quote }}
      {{- end }}
      {{- with $root.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      securityContext:
        {{- toYaml $root.Values.podSecurityContext | nindent 8 }}
      terminationGracePeriodSeconds: {{ include "svc-hub.int" (dict "path" "terminationGracePeriodSeconds" "value" $root.Values.terminationGracePeriodSeconds) }}
      containers:
        - name: {{ .component }}
          image: {{ include "svc-hub.image" $root | quote }}
          imagePullPolicy: {{ include "svc-hub.pullPolicy" $root }}
          args: [{{ .role | quote }}]
          ports:
            - name: http
              containerPort: {{ include "svc-hub.int" (dict "path" "httpPort" "value" $root.Values.httpPort) }}
              protocol: TCP
          env:
            {{- include "svc-hub.env" $root | nindent 12 }}
            {{- include "svc-hub.checkExtraEnv" (dict "root" $root "lists" (list (dict "path" "extraEnv" "entries" $root.Values.extraEnv) (dict "path" (printf "%s.env" .component) "entries" $c.env))) }}
            {{- with .componentEnv }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
            {{- with $c.env }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          {{- include "svc-hub.probes" $root | nindent 10 }}
          resources:
            {{- toYaml $c.resources | nindent 12 }}
          securityContext:
            {{- toYaml $root.Values.containerSecurityContext | nindent 12 }}
          volumeMounts:
            - name: tmp
              mountPath: /tmp
            {{- with .extraMounts }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
      volumes:
        - name: tmp
          emptyDir:
            sizeLimit: {{ $root.Values.tmp.sizeLimit | quote }}
        {{- with .extraVolumes }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- with $c.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $c.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $c.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with (include "svc-hub.topologySpread" . | fromYamlArray) }}
      topologySpreadConstraints:
        {{- toYaml . | nindent 8 }}
      {{- end }}
{{- end }}

{{/*
The topologySpreadConstraints of a component's pods, as a YAML list. The component's
topologySpreadConstraints value when it is a list (an empty one: none), else the chart's default when
.defaultSpread is set: at most one pod more on a node than on another (kubernetes.io/hostname),
ScheduleAnyway, so a single node still runs every replica. A constraint without labelSelector gets the
component's selector labels.
*/}}
{{- define "svc-hub.topologySpread" -}}
{{- $selector := dict "matchLabels" (include "svc-hub.selectorLabels" . | fromYaml) }}
{{- $constraints := list }}
{{- if kindIs "slice" .values.topologySpreadConstraints }}
{{- range .values.topologySpreadConstraints }}
{{- $constraint := deepCopy . }}
{{- if not (hasKey $constraint "labelSelector") }}
{{- $_ := set $constraint "labelSelector" $selector }}
{{- end }}
{{- $constraints = append $constraints $constraint }}
{{- end }}
{{- else if .defaultSpread }}
{{- $constraints = list (dict "maxSkew" 1 "topologyKey" "kubernetes.io/hostname" "whenUnsatisfiable" "ScheduleAnyway" "labelSelector" $selector) }}
{{- end }}
{{- toYaml $constraints }}
{{- end }}

{{/*
A component's PodDisruptionBudget, only where it has more than one replica: with one, minAvailable 1
would block every node drain and a budget of 0 protects nothing. Includes its leading "---".
*/}}
{{- define "svc-hub.podDisruptionBudget" -}}
{{- $c := .values }}
{{- $pdb := $c.podDisruptionBudget | default dict }}
{{- if and ($pdb.enabled | default false) (gt (int $c.replicas) 1) }}
{{- if and (not (kindIs "string" $pdb.minAvailable)) (ge (int $pdb.minAvailable) (int $c.replicas)) }}
{{- fail (printf "%s.podDisruptionBudget.minAvailable (%d) must be below %s.replicas (%d): otherwise no node drain can evict one of its pods" .component (int $pdb.minAvailable) .component (int $c.replicas)) }}
{{- end }}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "svc-hub.componentName" . }}
  namespace: {{ .root.Release.Namespace | quote }}
  labels:
    {{- include "svc-hub.componentLabels" . | nindent 4 }}
spec:
  minAvailable: {{ if and (kindIs "string" $pdb.minAvailable) (regexMatch "^[0-9]+%$" $pdb.minAvailable) }}{{ $pdb.minAvailable | quote }}{{ else }}{{ include "svc-hub.int" (dict "path" (printf "%s.podDisruptionBudget.minAvailable" .component) "value" $pdb.minAvailable) }}{{ end }}
  selector:
    matchLabels:
      {{- include "svc-hub.selectorLabels" . | nindent 6 }}
{{- end }}
{{- end }}

{{/* A ServiceAccount of one component. */}}
{{- define "svc-hub.serviceAccount" -}}
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ include "svc-hub.componentName" . }}
  namespace: {{ .root.Release.Namespace | quote }}
  labels:
    {{- include "svc-hub.componentLabels" . | nindent 4 }}
  {{- with .values.serviceAccount.annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
automountServiceAccountToken: {{ .automountToken }}
{{- end }}

{{/* The name of a cluster-scoped object of a component: prefixed by the release namespace, so that releases of the same name in two namespaces do not collide. */}}
{{- define "svc-hub.clusterName" -}}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$" .root.Release.Namespace) }}
{{- fail (printf "the release namespace %s is refused: a namespace is a DNS label (lower-case letters, digits, dashes; at most 63)" (toJson .root.Release.Namespace)) }}
{{- end }}
{{- printf "%s-%s" .root.Release.Namespace (include "svc-hub.componentName" .) }}
{{- end }}

{{/* The dispatchers' Lease: svc.leader.lease-name when config sets it, else <fullname>-dispatch. */}}
{{- define "svc-hub.dispatchLease" -}}
{{- $config := .Values.config | default dict }}
{{- if hasKey $config "svc.leader.lease-name" }}
{{- index $config "svc.leader.lease-name" }}
{{- else }}
{{- printf "%s-dispatch" (include "svc-hub.fullname" .) }}
{{- end }}
{{- end }}

{{/* The operator's Lease, as cmd/operator.ts names it: the dispatchers' Lease with -dispatch replaced by -operator. */}}
{{- define "svc-hub.operatorLease" -}}
{{- printf "%s-operator" (include "svc-hub.dispatchLease" . | trimSuffix "-dispatch") }}
{{- end }}

{{/*
Rules of a Role on a Lease: create (which cannot name the object) and get/update of the one Lease
named (the elector reads it and replaces it with the resourceVersion it read). Argument: the Lease name.
*/}}
{{- define "svc-hub.leaseRules" -}}
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [create]
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  resourceNames: [{{ . | quote }}]
  verbs: [get, update]
{{- end }}

{{/*
The custom resources the operator reconciles, by API group. test/chart.test.ts
fails when a CRD in files/crds/ names a group or plural missing here.
*/}}
{{- define "svc-hub.customResources" -}}
connectors.svc.io: [connectors]
apps.svc.io: [entities, exports, workflows, processes]
{{- end }}

{{/*
Rules on the custom resources: read, list and watch them, replace them (the finalizer svc.io/cleanup
is written with an update), and merge-patch their status; nothing else (kube/rbac.ts declares what
the operator calls; test/chart.test.ts holds these rules to it). Argument: the chart context.
*/}}
{{- define "svc-hub.operatorResourceRules" -}}
{{- range $group, $plurals := (include "svc-hub.customResources" . | fromYaml) }}
- apiGroups: [{{ $group }}]
  resources: [{{ join ", " $plurals }}]
  verbs: [get, list, watch, update]
- apiGroups: [{{ $group }}]
  resources: [{{ range $i, $p := $plurals }}{{ if $i }}, {{ end }}{{ $p }}/status{{ end }}]
  verbs: [patch]
{{- end }}
{{- end }}
