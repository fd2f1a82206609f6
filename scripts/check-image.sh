#!/usr/bin/env bash
# Runs the image `make image` built (dist/image) as a container would run,
# without a Docker engine: umoci unpacks it into an OCI runtime bundle and
# runc runs it, as root, on the host's network (the bundle's network
# namespace removed) against PostgreSQL ($LAPSE_TEST_POSTGRES, in a schema
# of its own dropped at the end), with the root filesystem read-only as the
# Helm chart runs it. Checks:
#   - the image holds the expected files and no shell;
#   - lapse runs as nonroot (uid 65532), not root;
#   - /healthz and /readyz answer 200;
#   - SIGTERM: lapse logs "stopped" and exits 0 within 10 s.
# Called by .ci/run and `make check-image`; installs umoci and runc (Debian)
# when run as root without them.
set -euo pipefail
cd "$(dirname "$0")/.."

pg=${LAPSE_TEST_POSTGRES:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}
dist=${DIST:-dist}
log() { echo "check-image: $*"; }
fail() { echo "check-image: FAIL: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || fail "runc runs the container as root: run as root"
missing=()
for tool in umoci runc jq curl psql; do command -v $tool >/dev/null || missing+=("$tool"); done
if [ ${#missing[@]} -gt 0 ]; then
	pkgs=("${missing[@]/psql/postgresql-client}")
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
fi
[ -f "$dist/image/index.json" ] || fail "$dist/image is missing: run make image first"
ref=$(jq -r '.manifests[0].annotations["org.opencontainers.image.ref.name"]' "$dist/image/index.json")

work=$(mktemp -d /tmp/lapse-check-image.XXXXXX)
id=lapse-check-image-$$
schema=lapse_image_check_$$
cleanup() {
	runc delete --force "$id" >/dev/null 2>&1 || true
	psql -q "$pg" -c "DROP SCHEMA IF EXISTS $schema CASCADE" >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT

log "umoci unpack $dist/image:$ref"
umoci unpack --image "$dist/image:$ref" "$work/bundle" >/dev/null
rootfs=$work/bundle/rootfs
files=$(cd "$rootfs" && find . -mindepth 1 \( -type f -o -type l \) | sort | tr '\n' ' ')
want="./etc/group ./etc/passwd ./etc/ssl/certs/ca-certificates.crt ./usr/bin/lapse "
[ "$files" = "$want" ] || fail "the image holds [$files], want [$want]"
[ "$(stat -c %u:%g "$rootfs/var/lib/lapse")" = 65532:65532 ] || fail "/var/lib/lapse is not nonroot's"
if command -v file >/dev/null; then
	file "$rootfs/usr/bin/lapse" | grep -q 'statically linked' || fail "/usr/bin/lapse is not statically linked"
fi

# The container as the image configures it (entrypoint, user, env, working
# directory), with a store, a token and an address of the test's: the
# image's LAPSE_ADDR=:8080 listens on all interfaces, which needs the token;
# :0 does too, on a free port.
psql -q -v ON_ERROR_STOP=1 "$pg" -c "CREATE SCHEMA $schema" >/dev/null
store="$pg&search_path=$schema"
[[ $pg == *\?* ]] || store="$pg?search_path=$schema"
token=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
jq --arg store "$store" --arg token "$token" '
	.process.terminal = false
	| .process.args += ["--store", $store]
	| .process.env = [(.process.env[] | select(startswith("LAPSE_ADDR=") | not)), "LAPSE_ADDR=:0", "LAPSE_API_TOKEN=" + $token]
	| .root.readonly = true
	| .linux.namespaces |= map(select(.type != "network"))
' "$work/bundle/config.json" >"$work/config.json"
mv "$work/config.json" "$work/bundle/config.json"

log "runc run $(jq -c '.process.args[:2] + ["--store", "…"]' "$work/bundle/config.json")"
runc run --bundle "$work/bundle" "$id" </dev/null >"$work/out.log" 2>&1 &
runc_pid=$!
addr=
for _ in $(seq 1 150); do # 30 s: a cold PostgreSQL migration included
	addr=$(sed -n 's/.*msg="lapse serving" addr=\([^ ]*\).*/\1/p' "$work/out.log" | head -n1)
	[ -n "$addr" ] && break
	kill -0 "$runc_pid" 2>/dev/null || break
	sleep 0.2
done
[ -n "$addr" ] || { cat "$work/out.log"; fail "lapse did not start serving within 30 s"; }
port=${addr##*:}
log "serving on port $port"

pid=$(runc state "$id" | jq -r .pid)
uid=$(awk '/^Uid:/ { print $2 }' "/proc/$pid/status")
[ "$uid" = 65532 ] || fail "lapse runs as uid $uid, want 65532 (nonroot)"

for path in /healthz /readyz; do
	code=$(curl -s -o "$work/body" -w '%{http_code}' --max-time 5 "http://127.0.0.1:$port$path")
	[ "$code" = 200 ] || { cat "$work/body" "$work/out.log"; fail "GET $path answered $code, want 200"; }
	log "GET $path: 200 $(cat "$work/body")"
done
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "http://127.0.0.1:$port/v1/orders")
[ "$code" = 401 ] || fail "GET /v1/orders without the token answered $code, want 401"
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 -H "Authorization: Bearer $token" "http://127.0.0.1:$port/v1/orders")
[ "$code" = 200 ] || fail "GET /v1/orders with the token (from LAPSE_API_TOKEN) answered $code, want 200"

start=$(date +%s%N)
runc kill "$id" TERM
for _ in $(seq 1 100); do kill -0 "$runc_pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$runc_pid" 2>/dev/null; then cat "$work/out.log"; fail "lapse still runs 10 s after SIGTERM"; fi
status=0
wait "$runc_pid" || status=$?
ms=$((($(date +%s%N) - start) / 1000000))
grep -q 'msg=stopped' "$work/out.log" || { cat "$work/out.log"; fail "no \"stopped\" line after SIGTERM"; }
[ "$status" = 0 ] || { cat "$work/out.log"; fail "lapse exited $status after SIGTERM, want 0"; }
log "SIGTERM: stopped, exit 0, in ${ms} ms"
log "ok"
