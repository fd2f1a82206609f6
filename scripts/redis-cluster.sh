#!/usr/bin/env bash
# redis-cluster.sh start|stop|status <dir> — a throw-away three-node Redis
# Cluster on local ports for the timer/redis tests:
#
#   bash scripts/redis-cluster.sh start /tmp/lapse-redis-cluster
#   LAPSE_TEST_REDIS_CLUSTER=redis-cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002 \
#     go test -race ./timer/redis/
#   bash scripts/redis-cluster.sh stop /tmp/lapse-redis-cluster
#
# The nodes keep nothing on disk (--save "" --appendonly no) except their
# cluster configuration (nodes.conf) in <dir>/<port>/. start is idempotent: it
# starts the nodes that are not running, creates the cluster if it is not
# formed (resetting nodes left half-configured by an earlier run) and waits for
# cluster_state:ok on every node. stop shuts the nodes down and removes their
# cluster configuration, so the next start creates a fresh cluster.
#
# Ports: LAPSE_REDIS_CLUSTER_PORTS (default "7000 7001 7002"); each node also
# uses its port + 10000 for the cluster bus.
set -euo pipefail

usage() { echo "usage: $0 start|stop|status <dir>" >&2; exit 2; }
[ $# -eq 2 ] || usage
cmd=$1 dir=$2
read -r -a ports <<<"${LAPSE_REDIS_CLUSTER_PORTS:-7000 7001 7002}"
host=127.0.0.1

cli() { local port=$1; shift; redis-cli -h "$host" -p "$port" "$@"; }
up() { [ "$(cli "$1" ping 2>/dev/null)" = PONG ]; }
state() { cli "$1" cluster info 2>/dev/null | tr -d '\r' | sed -n 's/^cluster_state://p'; }
all_ok() { for p in "${ports[@]}"; do [ "$(state "$p")" = ok ] || return 1; done; }

wait_until() { # wait_until <seconds> <what> <command…>
	local secs=$1 what=$2; shift 2
	for _ in $(seq 1 $((secs * 10))); do "$@" && return 0; sleep 0.1; done
	echo "redis-cluster: $what not within ${secs}s" >&2
	return 1
}

start_node() {
	local port=$1 nd="$dir/$1"
	if up "$port"; then return 0; fi
	mkdir -p "$nd"
	redis-server --bind "$host" --port "$port" --dir "$nd" \
		--cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 5000 \
		--save "" --appendonly no \
		--daemonize yes --pidfile "$nd/redis.pid" --logfile "$nd/redis.log"
	wait_until 10 "node $port" up "$port"
}

case $cmd in
start)
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd)
	for p in "${ports[@]}"; do start_node "$p"; done
	if all_ok; then
		echo "redis-cluster: running on ports ${ports[*]} (cluster_state:ok)"
		exit 0
	fi
	# Not formed, or left half-formed: start every node from an empty cluster
	# configuration and create the cluster.
	for p in "${ports[@]}"; do
		cli "$p" flushall >/dev/null
		cli "$p" cluster reset hard >/dev/null
	done
	addrs=()
	for p in "${ports[@]}"; do addrs+=("$host:$p"); done
	redis-cli --cluster create "${addrs[@]}" --cluster-replicas 0 --cluster-yes >"$dir/create.log" 2>&1 ||
		{ cat "$dir/create.log" >&2; exit 1; }
	wait_until 30 "cluster_state:ok on every node" all_ok
	echo "redis-cluster: created on ports ${ports[*]} (cluster_state:ok)"
	;;
stop)
	for p in "${ports[@]}"; do
		if up "$p"; then cli "$p" shutdown nosave >/dev/null 2>&1 || true; fi
	done
	for p in "${ports[@]}"; do
		wait_until 10 "node $p to stop" bash -c "! redis-cli -h $host -p $p ping >/dev/null 2>&1"
		rm -f "$dir/$p/nodes.conf" "$dir/$p/redis.pid"
	done
	echo "redis-cluster: stopped"
	;;
status)
	for p in "${ports[@]}"; do
		if up "$p"; then echo "$p: up, cluster_state:$(state "$p")"; else echo "$p: down"; fi
	done
	all_ok
	;;
*) usage ;;
esac
