{{/* Names, labels, images and the checks that span several values. */}}

{{- define "hap.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* <release>-<chart>, or the release name alone when it already contains the chart name. */}}
{{- define "hap.fullname" -}}
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

{{/* A component's object name: dict "root" $ "component" "encoder"; at most 63 characters with
     the longest component, "otel-collector". */}}
{{- define "hap.componentName" -}}
{{- printf "%s-%s" (include "hap.fullname" .root | trunc 48 | trimSuffix "-") .component -}}
{{- end -}}

{{- define "hap.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "hap.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: hap
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Selector labels of one component: dict "root" $ "component" "decode". */}}
{{- define "hap.selectorLabels" -}}
app.kubernetes.io/name: {{ include "hap.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "hap.componentLabels" -}}
{{ include "hap.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "hap.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "hap.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The HAP image of one service, pinned: [registry/]repository:tag[@digest]. */}}
{{- define "hap.image" -}}
{{- $root := .root -}}
{{- $svc := index $root.Values .component -}}
{{- $img := $root.Values.image -}}
{{- $repo := default $img.repository $svc.image.repository -}}
{{- $flavor := default $img.flavor $svc.image.flavor -}}
{{- if not (has $flavor (list "cpu" "cuda")) -}}
{{- fail (printf "%s.image.flavor / image.flavor must be cpu or cuda, not %q" .component $flavor) -}}
{{- end -}}
{{- $tag := default $img.tag $svc.image.tag | default (printf "%s-%s" $root.Chart.AppVersion $flavor) | toString -}}
{{- if eq $tag "latest" -}}
{{- fail (printf "%s: the image tag 'latest' is refused; pin a version (image.tag or %s.image.tag)" .component .component) -}}
{{- end -}}
{{- $ref := printf "%s:%s" (required "image.repository is required" $repo) $tag -}}
{{- if $img.registry -}}{{- $ref = printf "%s/%s" $img.registry $ref -}}{{- end -}}
{{- if $img.digest -}}{{- $ref = printf "%s@%s" $ref $img.digest -}}{{- end -}}
{{- $ref -}}
{{- end -}}

{{/* The flavor a service runs (cpu or cuda). */}}
{{- define "hap.flavor" -}}
{{- $svc := index .root.Values .component -}}
{{- default .root.Values.image.flavor $svc.image.flavor -}}
{{- end -}}

{{/* Service address host:port inside the cluster. */}}
{{- define "hap.address" -}}
{{- $svc := index .root.Values .component -}}
{{- printf "%s.%s.svc:%d" (include "hap.componentName" .) .root.Release.Namespace (int $svc.port) -}}
{{- end -}}

{{/* host:port the front door dials for a peer (encoder, decode): the peer's headless Service,
     whose name resolves to every ready pod, so gRPC's round_robin spreads calls over all of
     them (a ClusterIP name is one virtual IP: one connection, one pod). */}}
{{- define "hap.peerAddress" -}}
{{- $svc := index .root.Values .component -}}
{{- printf "%s-headless.%s.svc:%d" (include "hap.componentName" .) .root.Release.Namespace (int $svc.port) -}}
{{- end -}}

{{/* The OTLP endpoint the services export to; "" when tracing is off. */}}
{{- define "hap.tracingEndpoint" -}}
{{- if .Values.tracing.enabled -}}
{{- if .Values.tracing.endpoint -}}
{{- .Values.tracing.endpoint -}}
{{- else if .Values.otelCollector.enabled -}}
{{- $port := ternary 4317 4318 (eq .Values.tracing.protocol "grpc") -}}
{{- printf "http://%s.%s.svc:%d" (include "hap.componentName" (dict "root" . "component" "otel-collector")) .Release.Namespace $port -}}
{{- else -}}
{{- fail "tracing.enabled needs an endpoint: set tracing.endpoint or otelCollector.enabled=true" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The model volume every service mounts read-only. */}}
{{- define "hap.modelVolume" -}}
{{- $v := default dict .Values.model.volume -}}
- name: model
{{- if eq $v.type "persistentVolumeClaim" }}
  persistentVolumeClaim:
    claimName: {{ include "hap.componentName" (dict "root" . "component" "model") }}
    readOnly: true
{{- else if eq $v.type "existingClaim" }}
  persistentVolumeClaim:
    claimName: {{ required "model.volume.existingClaim is required when model.volume.type is existingClaim" $v.existingClaim }}
    readOnly: true
{{- else if eq $v.type "hostPath" }}
  hostPath:
    path: {{ required "model.volume.hostPath.path is required when model.volume.type is hostPath" $v.hostPath.path }}
    type: {{ $v.hostPath.type }}
{{- end }}
{{- end -}}

{{/* The tokens file of the Secret the chart creates from auth.tokens. */}}
{{- define "hap.authTokensFile" -}}
# client-id:token (helm/hap values auth.tokens)
{{ range .Values.auth.tokens -}}
{{ .client }}:{{ .token }}
{{ end -}}
{{- end -}}

{{/* The Secret holding the front door's tokens file (key `tokens`). */}}
{{- define "hap.authSecretName" -}}
{{- .Values.auth.existingSecret | default (include "hap.componentName" (dict "root" . "component" "auth")) -}}
{{- end -}}

{{/* The client the helm test authenticates as. */}}
{{- define "hap.authTestClient" -}}
{{- if .Values.auth.testClient -}}
{{- .Values.auth.testClient -}}
{{- else if .Values.auth.tokens -}}
{{- (first .Values.auth.tokens).client -}}
{{- end -}}
{{- end -}}

{{/* Checks across values, run once by validate.yaml; each failure names the value to change. */}}
{{- define "hap.validate" -}}
{{- $v := .Values -}}
{{- if not $v.model.volume -}}
{{- fail "model.volume is required: the services load the model from a shared volume (type persistentVolumeClaim, existingClaim or hostPath)" -}}
{{- end -}}
{{- if not (has $v.model.volume.type (list "persistentVolumeClaim" "existingClaim" "hostPath")) -}}
{{- fail (printf "model.volume.type must be persistentVolumeClaim, existingClaim or hostPath, not %q" (toString $v.model.volume.type)) -}}
{{- end -}}
{{- if and $v.pruning.retain $v.pruning.flops -}}
{{- fail "pruning: give one default budget, pruning.retain or pruning.flops (set the other to \"\")" -}}
{{- end -}}
{{- range $c := list "encoder" "prefill" "decode" -}}
{{- $svc := index $v $c -}}
{{- $req := default dict $svc.resources.requests -}}
{{- if not (and $req.cpu $req.memory) -}}
{{- fail (printf "%s.resources.requests.cpu and .memory are required: the scheduler places model servers by them" $c) -}}
{{- end -}}
{{- if and (gt (int $svc.gpu.count) 0) (ne (include "hap.flavor" (dict "root" $ "component" $c)) "cuda") -}}
{{- fail (printf "%s.gpu.count is %d but %s runs the cpu image: set image.flavor or %s.image.flavor to cuda" $c (int $svc.gpu.count) $c $c) -}}
{{- end -}}
{{- if hasKey (default dict $svc.resources.limits) $v.gpu.resourceName -}}
{{- fail (printf "%s.resources.limits must not name %s: request GPUs with %s.gpu.count" $c $v.gpu.resourceName $c) -}}
{{- end -}}
{{- if and $svc.pdb.enabled (ne (toString $svc.pdb.minAvailable) "") (ne (toString $svc.pdb.maxUnavailable) "") -}}
{{- fail (printf "%s.pdb: set minAvailable or maxUnavailable, not both" $c) -}}
{{- end -}}
{{- if and $svc.autoscaling.enabled (gt (int $svc.autoscaling.minReplicas) (int $svc.autoscaling.maxReplicas)) -}}
{{- fail (printf "%s.autoscaling.minReplicas is above maxReplicas" $c) -}}
{{- end -}}
{{- if and $v.tls.enabled (not (index $v.tls.secrets $c)) -}}
{{- fail (printf "tls.enabled needs tls.secrets.%s: the name of a kubernetes.io/tls secret with tls.crt, tls.key and ca.crt" $c) -}}
{{- end -}}
{{- end -}}
{{- if $v.tls.enabled -}}
{{- $health := int $v.probes.healthPort -}}
{{- range $c := list "encoder" "prefill" "decode" -}}
{{- if eq $health (int (index $v $c).port) -}}
{{- fail (printf "probes.healthPort %d is %s.port too: the plaintext health checks need a port of their own" $health $c) -}}
{{- end -}}
{{- end -}}
{{- if and $v.metrics.enabled (eq $health (int $v.metrics.port)) -}}
{{- fail (printf "probes.healthPort %d is metrics.port too: the plaintext health checks need a port of their own" $health) -}}
{{- end -}}
{{- if and $v.openai.enabled (eq $health (int $v.openai.port)) -}}
{{- fail (printf "probes.healthPort %d is openai.port too: the plaintext health checks need a port of their own" $health) -}}
{{- end -}}
{{- end -}}
{{- if $v.openai.enabled -}}
{{- $port := int $v.openai.port -}}
{{- if eq $port (int $v.prefill.port) -}}
{{- fail (printf "openai.port %d is prefill.port too: give the OpenAI HTTP API its own port" $port) -}}
{{- end -}}
{{- if and $v.metrics.enabled (eq $port (int $v.metrics.port)) -}}
{{- fail (printf "openai.port %d is metrics.port too: give the OpenAI HTTP API its own port" $port) -}}
{{- end -}}
{{- if and $v.tls.enabled $v.tls.mutual -}}
{{- fail "openai.enabled serves plain HTTP without client certificates, which would bypass tls.mutual: set openai.enabled=false" -}}
{{- end -}}
{{- end -}}
{{- if $v.auth.enabled -}}
{{- if and $v.auth.existingSecret $v.auth.tokens -}}
{{- fail "auth: give auth.existingSecret or auth.tokens, not both" -}}
{{- end -}}
{{- if not (or $v.auth.existingSecret $v.auth.tokens) -}}
{{- fail "auth.enabled needs auth.existingSecret (a Secret with the key `tokens`: one client-id:token per line) or auth.tokens" -}}
{{- end -}}
{{- if and $v.auth.existingSecret (not $v.auth.testClient) -}}
{{- fail "auth.testClient is required with auth.existingSecret: the helm test authenticates as that client, with its token from the Secret" -}}
{{- end -}}
{{- if $v.auth.tokens -}}
{{- $seen := dict -}}
{{- $clients := list -}}
{{- range $v.auth.tokens -}}
{{- $clients = append $clients (toString .client) -}}
{{- $token := toString .token -}}
{{- if hasKey $seen $token -}}
{{- fail (printf "auth.tokens: clients %q and %q have the same token; give every token to one client only" (get $seen $token) (toString .client)) -}}
{{- end -}}
{{- $_ := set $seen $token (toString .client) -}}
{{- end -}}
{{- if and $v.auth.testClient (not (has (toString $v.auth.testClient) $clients)) -}}
{{- fail (printf "auth.testClient %q is not a client of auth.tokens" (toString $v.auth.testClient)) -}}
{{- end -}}
{{- end -}}
{{- else if gt (int $v.auth.maxConcurrentPerClient) 0 -}}
{{- fail "auth.maxConcurrentPerClient needs auth.enabled: clients are known by their tokens" -}}
{{- end -}}
{{- if and $v.metrics.serviceMonitor.enabled (not $v.metrics.enabled) -}}
{{- fail "metrics.serviceMonitor.enabled needs metrics.enabled" -}}
{{- end -}}
{{- $_ := include "hap.tracingEndpoint" . -}}
{{- end -}}
