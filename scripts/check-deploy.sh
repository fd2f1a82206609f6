#!/usr/bin/env bash
# Checks of what deploy/ ships, without a Docker engine or a running systemd:
#   - deploy/prometheus/lapse-rules.yaml with promtool (Debian's prometheus);
#   - deploy/systemd/lapse.service with systemd-analyze verify, in a root of
#     its own holding the system's units and a built lapse as /usr/bin/lapse
#     (verify exits 0 on some errors, such as an unknown key: any output fails);
#   - deploy/helm/lapse with helm lint --strict and helm template: the
#     probes, the migration hook, --no-migrate, the secrets as env, the
#     ServiceMonitor when asked for (helm from scripts/tools.sh).
# Called by .ci/run and `make check-deploy`; installs what it needs when run
# as root on a Debian machine without it.
set -euo pipefail
cd "$(dirname "$0")/.."

install_pkg() {
	if [ "$(id -u)" != 0 ]; then echo "check-deploy: $1 is missing (apt-get install $2)" >&2; exit 1; fi
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$2" >/dev/null
}

echo "check-deploy: promtool check rules"
command -v promtool >/dev/null || install_pkg promtool prometheus
promtool check rules deploy/prometheus/lapse-rules.yaml

echo "check-deploy: systemd-analyze verify deploy/systemd/lapse.service"
command -v systemd-analyze >/dev/null || install_pkg systemd-analyze systemd
root=$(mktemp -d /tmp/lapse-check-deploy.XXXXXX)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/usr/bin" "$root/etc/systemd/system" "$root/lib/systemd" "$root/usr/lib/systemd"
cp -a /lib/systemd/system "$root/lib/systemd/"
[ -d /usr/lib/systemd/system ] && cp -a /usr/lib/systemd/system "$root/usr/lib/systemd/"
go build -o "$root/usr/bin/lapse" ./cmd/lapse
cp deploy/systemd/lapse.service "$root/etc/systemd/system/"
out=$(systemd-analyze verify --man=no --root="$root" /etc/systemd/system/lapse.service 2>&1) || { echo "$out"; exit 1; }
if [ -n "$out" ]; then echo "$out"; echo "check-deploy: systemd-analyze verify printed the above"; exit 1; fi
echo "check-deploy: helm lint and helm template deploy/helm/lapse"
bash scripts/tools.sh helm
helm=$(go env GOPATH)/bin/helm
chart=deploy/helm/lapse
"$helm" lint --strict "$chart"
"$helm" lint --strict "$chart" --set serviceMonitor.enabled=true,store.existingSecret=db,store.key=url
out=$("$helm" template lapse "$chart")
want=(
	"path: /healthz" "path: /readyz"                            # liveness, readiness
	'"helm.sh/hook": pre-install,pre-upgrade' "args: [migrate]" # the migration Job
	"- --no-migrate" "terminationGracePeriodSeconds: 30"
	"name: LAPSE_STORE" "name: LAPSE_API_TOKEN" "name: LAPSE_CALLBACK_SECRET"
	"readOnlyRootFilesystem: true" "runAsNonRoot: true"
)
for w in "${want[@]}"; do
	grep -qF -- "$w" <<<"$out" || { echo "$out"; echo "check-deploy: helm template has no \"$w\""; exit 1; }
done
if grep -q 'kind: ServiceMonitor' <<<"$out"; then echo "check-deploy: a ServiceMonitor without serviceMonitor.enabled"; exit 1; fi
out=$("$helm" template lapse "$chart" --set serviceMonitor.enabled=true)
grep -q 'apiVersion: monitoring.coreos.com/v1' <<<"$out" ||
	{ echo "check-deploy: no ServiceMonitor with serviceMonitor.enabled=true"; exit 1; }
echo "check-deploy: ok"
