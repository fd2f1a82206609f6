#!/usr/bin/env bash
# benchmarks.sh — regenerate BENCHMARKS.md: the machine, the ceiling of its
# Redis and PostgreSQL (scripts/ceiling.sh), lapse's timers side by side with
# asynq and river (bench/compare), and `lapse bench` end to end, each with the
# exact command that produced it.
#
#   bash scripts/benchmarks.sh [--out BENCHMARKS.md] [--quick]
#
# Needs Redis on 127.0.0.1:6379 (database 12 is used, keys under prefixes of
# the run's own) and PostgreSQL on 127.0.0.1:5432 (database test, user
# postgres; a schema per run, dropped after), redis-benchmark, pgbench, psql,
# redis-cli, jq and Go. Takes about ten minutes; --quick runs everything at a
# tenth of the size to check the script itself (its figures mean little).
# Override the servers with LAPSE_BENCH_REDIS (redis://host:port/db) and
# LAPSE_BENCH_POSTGRES (postgres://…); both must be on this machine.
# RabbitMQ (LAPSE_BENCH_AMQP, default amqp://guest:guest@127.0.0.1:5672/)
# runs the amqp rows and, with rabbitmqctl, the million pending timers of
# section 6. The nats timer rows need nats-server 2.12+ (message schedules):
# LAPSE_BENCH_NATS_TIMERS=nats://host:port names one; otherwise the script
# starts LAPSE_BENCH_NATSD (default /tmp/natsbin/nats-server, built with
# `GOBIN=/tmp/natsbin go install github.com/nats-io/nats-server/v2@v2.15.2`)
# on 127.0.0.1:4223 with a store of its own, stopped afterwards; without
# either, those rows are skipped with a note.
set -euo pipefail
cd "$(dirname "$0")/.."

out=BENCHMARKS.md
quick=0
while [ $# -gt 0 ]; do
	case "$1" in
	--out) out=$2; shift 2 ;;
	--quick) quick=1; shift ;;
	-h | --help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "benchmarks.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done

redis=${LAPSE_BENCH_REDIS:-redis://127.0.0.1:6379/12}
pg=${LAPSE_BENCH_POSTGRES:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}
die() { echo "benchmarks.sh: $*" >&2; exit 1; }
for tool in go jq psql redis-cli redis-benchmark pgbench; do
	command -v "$tool" >/dev/null || die "$tool not found"
done
[[ "$redis" =~ ^redis://([^/:]+):([0-9]+)/([0-9]+)$ ]] || die "LAPSE_BENCH_REDIS=$redis: want redis://host:port/db"
redis_host=${BASH_REMATCH[1]} redis_port=${BASH_REMATCH[2]} redis_db=${BASH_REMATCH[3]}

# Sizes: the issue's workload, and a burst of the same count all due at once.
timers=20000 over=10s lead=10s burst_lead=20s ceiling_s=10 bench_scale=1 creates_n=20000
ref_duration=30s ref_timeout=15s
# Scale (section 7): pending timers seeded from PostgreSQL, settled orders in
# the table before creates are timed again, orders due in one second.
scale_pending=1000000 scale_history=10000000 scale_due=100000 scale_lead=90s
if [ "$quick" = 1 ]; then
	timers=2000 over=2s lead=6s burst_lead=6s ceiling_s=2 bench_scale=10 creates_n=2000
	ref_duration=4s ref_timeout=2s
	scale_pending=20000 scale_history=100000 scale_due=5000 scale_lead=10s
fi

tmp=$(mktemp -d)
schemas=()
natsd_pid=
cleanup() {
	if [ -n "$natsd_pid" ]; then kill "$natsd_pid" 2>/dev/null || true; fi
	for s in "${schemas[@]}"; do
		PGOPTIONS='-c client_min_messages=warning' psql "$pg" -qAt -c "DROP SCHEMA IF EXISTS $s CASCADE" >/dev/null 2>&1 || true
	done
	rm -rf "$tmp"
}
trap cleanup EXIT
step() { printf '\nbenchmarks.sh: %s\n' "$*" >&2; }

amqp=${LAPSE_BENCH_AMQP:-amqp://guest:guest@127.0.0.1:5672/}
nats=${LAPSE_BENCH_NATS:-nats://127.0.0.1:4222}
# The nats timers need nats-server 2.12+: the one named, or one started here.
nats_timers=${LAPSE_BENCH_NATS_TIMERS:-}
natsd=${LAPSE_BENCH_NATSD:-/tmp/natsbin/nats-server}
if [ -z "$nats_timers" ] && [ -x "$natsd" ]; then
	if (exec 3<>/dev/tcp/127.0.0.1/4223) 2>/dev/null; then
		echo "benchmarks.sh: 127.0.0.1:4223 is taken; the nats timer rows are skipped (set LAPSE_BENCH_NATS_TIMERS)" >&2
	else
		"$natsd" -js -a 127.0.0.1 -p 4223 -sd "$tmp/nats" >"$tmp/natsd.log" 2>&1 &
		natsd_pid=$!
		for _ in $(seq 100); do
			if (exec 3<>/dev/tcp/127.0.0.1/4223) 2>/dev/null; then nats_timers=nats://127.0.0.1:4223; break; fi
			sleep 0.1 # until the server listens, at most 10 s
		done
		[ -n "$nats_timers" ] || die "$natsd did not listen on 127.0.0.1:4223 within 10 s (see $tmp/natsd.log)"
	fi
fi

# --- The machine ---------------------------------------------------------------
load_start=$(uptime | sed 's/.*load average: //')
cpu_model=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
mem=$(awk '/^MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)
pg_version=$(psql "$pg" -qAt -c 'SHOW server_version')
pg_settings=$(psql "$pg" -qAt -F '=' -c "SELECT name, setting || coalesce(unit, '') FROM pg_settings WHERE name IN ('fsync', 'synchronous_commit', 'shared_buffers', 'max_connections') ORDER BY name" | paste -sd ' ' | sed 's/ /, /g')
rinfo() { redis-cli -h "$redis_host" -p "$redis_port" INFO "$1" | tr -d '\r' | awk -F: -v k="$2" '$1 == k { print $2 }'; }
redis_version=$(rinfo server redis_version)
redis_persist="appendonly $(redis-cli -h "$redis_host" -p "$redis_port" CONFIG GET appendonly | tail -1), save '$(redis-cli -h "$redis_host" -p "$redis_port" CONFIG GET save | tail -1)'"

# --- 1. The ceiling --------------------------------------------------------------
step "ceiling (scripts/ceiling.sh)"
ceiling_cmd="bash scripts/ceiling.sh --redis $redis_host:$redis_port/$redis_db --postgres '$pg' --seconds $ceiling_s --clients 2 --pool-clients 10"
bash scripts/ceiling.sh --redis "$redis_host:$redis_port/$redis_db" --postgres "$pg" --seconds "$ceiling_s" --clients 2 --pool-clients 10 \
	--values "$tmp/ceiling.env" >"$tmp/ceiling.md"
# shellcheck disable=SC1091
. "$tmp/ceiling.env"
# The ceiling wrote a million seeded orders: flush them to disk now, not
# during the runs that follow (best effort: CHECKPOINT needs a privileged role).
psql "$pg" -qAt -c CHECKPOINT >/dev/null 2>&1 || true

# --- 1b. lapse's creates against the ceiling ------------------------------------------
creates_cmd="LAPSE_TEST_POSTGRES='$pg' go test -run '^\$' -bench CreateOrder -benchtime ${creates_n}x ./store/postgres/"
step "lapse creates, store benchmark ($creates_cmd)"
LAPSE_TEST_POSTGRES="$pg" go test -run '^$' -bench CreateOrder -benchtime "${creates_n}x" ./store/postgres/ >"$tmp/creates.txt"
created() { # created <lone|group> <skus>: orders/s of that benchmark
	awk -v n="BenchmarkCreateOrder/$1/skus=$2-" 'index($1, n) == 1 { for (i = 2; i < NF; i++) if ($(i + 1) == "orders/s") { printf "%d", $i; exit } }' "$tmp/creates.txt"
}

# --- 2. Side by side ----------------------------------------------------------------
compare() { # compare <name> <flags…>: run bench/compare, keep its JSON and table
	local name=$1; shift
	(cd bench/compare && go run . "$@" --redis "$redis" --postgres "$pg" --amqp "$amqp" --nats "$nats_timers" --json --out "$tmp/$name.md") >"$tmp/$name.json"
}
mq_flags="--amqp $amqp --nats ${nats_timers:-''}"
spread_cmd="cd bench/compare && go run . --timers $timers --over $over --lead $lead --redis $redis --postgres '$pg' $mq_flags"
step "side by side, $timers timers due over $over ($spread_cmd)"
compare spread --timers "$timers" --over "$over" --lead "$lead"
burst_cmd="cd bench/compare && go run . --timers $timers --over 0 --lead $burst_lead --redis $redis --postgres '$pg' $mq_flags"
step "side by side, $timers timers all due at once ($burst_cmd)"
compare burst --timers "$timers" --over 0 --lead "$burst_lead"

# --- 3. lapse bench ----------------------------------------------------------------
step "lapse bench"
go build -o "$tmp/lapse" ./cmd/lapse
bench_help=$("$tmp/lapse" bench -h 2>&1 || true)
has() { grep -q -- "-$1 " <<<"$bench_help" || grep -q -- "-$1\$" <<<"$bench_help"; }
has json || die "lapse bench has no --json flag"
store=
pgschema() { # a fresh schema: sets store to the URL using it
	local s="lapsebench_$$_$((${#schemas[@]} + 1))"
	PGOPTIONS='-c client_min_messages=warning' psql "$pg" -qAt -c "DROP SCHEMA IF EXISTS $s CASCADE; CREATE SCHEMA $s" >/dev/null
	schemas+=("$s")
	store="$pg&search_path=$s"
}
benches=()
bench() { # bench <flags…>: run lapse bench with --json, keep the command and the result
	local i=${#benches[@]}
	benches+=("lapse bench $*")
	echo "benchmarks.sh:   lapse bench $*" >&2
	if ! "$tmp/lapse" bench "$@" --json >"$tmp/bench$i.json" 2>"$tmp/bench$i.err"; then
		echo "{\"error\": $(tail -3 "$tmp/bench$i.err" | jq -Rs .)}" >"$tmp/bench$i.json"
	fi
}
o2000=$((2000 / bench_scale)) o10000=$((10000 / bench_scale))
bench --orders "$o2000" --spread 1s
bench --rate "$((1000 / bench_scale))" --duration 10s --timeout 2s
pgschema; bench --store "$store" --timers sql --orders "$o2000" --spread 1s
pgschema; bench --store "$store" --timers memory --orders "$o2000" --spread 1s
pgschema; bench --store "$store" --timers "$redis" --orders "$o10000" --spread 10s --lead 15s
if has rate && has duration; then
	rate=$((1000 / bench_scale))
	pgschema; bench --store "$store" --timers "$redis" --rate "$rate" --duration 10s
	pgschema; bench --store "$store" --timers sql --rate "$rate" --duration 10s
	# Creates at four times that, then every order on one SKU (the flash sale).
	pgschema; bench --store "$store" --timers memory --rate "$((4000 / bench_scale))" --duration 10s --timeout 3s
	pgschema; bench --store "$store" --timers memory --rate "$((3000 / bench_scale))" --duration 10s --timeout 3s --hot-sku-share 1
	# The reference workload from the field (30-50/s at peak, 15-minute timeout)
	# with the timeout compressed to seconds.
	pgschema; bench --store "$store" --timers "$redis" --rate 50 --duration "$ref_duration" --timeout "$ref_timeout"
	# The message-queue timers at the issue's rate (a prefix or stream of
	# the run's own, deleted after).
	pgschema; bench --store "$store" --timers "$amqp" --rate "$rate" --duration 10s --timeout 2s
	if [ -n "$nats_timers" ]; then
		pgschema; bench --store "$store" --timers "$nats_timers" --rate "$rate" --duration 10s --timeout 2s
	fi
	# Round trips: 5 ms added to each (a proxy in the process), so the
	# lateness counts the round trips from due to commit.
	if has chaos-latency; then
		pgschema; bench --store "$store" --timers "$redis" --chaos-latency 5ms --rate "$((200 / bench_scale))" --duration 10s --timeout 2s
		pgschema; bench --store "$store" --timers sql --chaos-latency 5ms --rate "$((200 / bench_scale))" --duration 10s --timeout 2s
	fi
	# The embedded default with payments: 30% of the orders paid (pay, then
	# a signed callback) on SQLite's single writer.
	bench --orders "$((20000 / bench_scale))" --rate "$((2000 / bench_scale))" --timeout 3s --grace 0s --pay-ratio 0.3
fi

# --- 5. Events out ----------------------------------------------------------------
# Each sink alone: the relay's lag at 1,000 orders/s, then a backlog drained,
# beside a plain publisher to the same broker measured in the same run.
sink_benches=()
sink_bench() { # sink_bench <sink URL>
	local i=${#sink_benches[@]} rate=$((1000 / bench_scale)) drain=$((10000 / bench_scale))
	pgschema
	local args=(--store "$store" --sink "$1" --rate "$rate" --duration 10s --timeout 2s --relay-drain "$drain")
	sink_benches+=("lapse bench ${args[*]}")
	echo "benchmarks.sh:   lapse bench ${args[*]}" >&2
	if ! "$tmp/lapse" bench "${args[@]}" --json >"$tmp/sink$i.json" 2>"$tmp/sink$i.err"; then
		echo "{\"error\": $(tail -3 "$tmp/sink$i.err" | jq -Rs .)}" >"$tmp/sink$i.json"
	fi
}
if has sink; then
	step "lapse bench --sink"
	sink_bench "${amqp%/}/?exchange=lapse.bench.$$"
	sink_bench "kafka://kfake/lapse.bench"
	sink_bench "$nats/lapse.bench$$"
fi
# --- 6. A million pending timers on RabbitMQ ----------------------------------------
millions=()
if command -v rabbitmqctl >/dev/null && rabbitmqctl list_vhosts -q >/dev/null 2>&1; then
	m_n=$((1000000 / bench_scale))
	for qt in classic quorum; do
		cmd="cd bench/compare && go run . million --timers $m_n --queue-type $qt --amqp $amqp"
		step "$cmd"
		i=${#millions[@]}
		millions+=("$cmd")
		if ! (cd bench/compare && go run . million --timers "$m_n" --queue-type "$qt" --amqp "$amqp" --json) >"$tmp/million$i.json" 2>"$tmp/million$i.err"; then
			echo "{\"error\": $(tail -3 "$tmp/million$i.err" | jq -Rs .)}" >"$tmp/million$i.json"
		fi
	done
else
	echo "benchmarks.sh: rabbitmqctl cannot reach the broker: section 6 (a million pending timers) is skipped" >&2
fi
# --- 7. Scale ---------------------------------------------------------------------------
scale_cmd="cd bench/compare && go run . scale --pending $scale_pending --history $scale_history --redis $redis --postgres '$pg'"
step "$scale_cmd"
if ! (cd bench/compare && go run . scale --pending "$scale_pending" --history "$scale_history" --redis "$redis" --postgres "$pg" --json) >"$tmp/scale.json" 2>"$tmp/scale.err"; then
	echo "{\"error\": $(tail -3 "$tmp/scale.err" | jq -Rs .)}" >"$tmp/scale.json"
fi
due_benches=()
due_bench() { # due_bench <flags…>: scale_due orders due in one second
	local i=${#due_benches[@]}
	due_benches+=("lapse bench $*")
	echo "benchmarks.sh:   lapse bench $*" >&2
	if ! "$tmp/lapse" bench "$@" --json >"$tmp/due$i.json" 2>"$tmp/due$i.err"; then
		echo "{\"error\": $(tail -3 "$tmp/due$i.err" | jq -Rs .)}" >"$tmp/due$i.json"
	fi
}
step "orders due in one second"
due_bench --orders "$scale_due" --spread 1s --lead "$scale_lead"
pgschema; due_bench --store "$store" --timers memory --orders "$scale_due" --spread 1s --lead "$scale_lead"
pgschema; due_bench --store "$store" --timers "$redis" --orders "$scale_due" --spread 1s --lead "$scale_lead"
pgschema; due_bench --store "$store" --timers sql --orders "$scale_due" --spread 1s --lead "$scale_lead"
load_end=$(uptime | sed 's/.*load average: //')

# --- BENCHMARKS.md ----------------------------------------------------------------
# Asked before $out is rewritten: the file being written is not a change of the code measured.
dirty=$(git diff --quiet HEAD -- . ":(exclude)$out" 2>/dev/null || echo ' (with uncommitted changes)')
jqr() { jq -r "$@"; }
# shellcheck disable=SC2016 # $s and $n are jq's variables, in jq programs
rate_of() { jqr --arg s "$2" '.results[] | select(.system == $s) | .timers_per_s | floor' "$tmp/$1.json"; }
pct() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b == 0) print "—"; else printf "%.0f%%", 100 * a / b }'; }
commas() { sed ':a; s/\B[0-9]\{3\}\>/,&/; ta' <<<"$1"; }
# shellcheck disable=SC2016
sched_rate() { jqr --arg s "$1" --argjson n "$timers" '.results[] | select(.system == $s) | if .schedule_failed == 0 and .schedule_s > 0 then ($n / .schedule_s | floor) else "" end' "$tmp/burst.json"; }

{
	cat <<EOF
# Benchmarks

Generated by \`bash scripts/benchmarks.sh\` on $(date -u '+%Y-%m-%d %H:%M UTC') from commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')$dirty. Rerun it to
regenerate this file; every table below names the command that produced it.

These figures come from a **shared machine**: other work (builds, test suites) was running on
the same two cores at the same time, so treat them as the order of magnitude on this class of
machine, not as a ceiling of lapse. The load average is recorded at the start and the end.

## The machine

| | |
| --- | --- |
| CPUs | $(nproc) × $cpu_model |
| memory | $mem |
| kernel | $(uname -sr) |
| Go | $(go version | awk '{ print $3 }') |
| PostgreSQL | $pg_version ($pg_settings), on this machine |
| Redis | $redis_version ($redis_persist), on this machine |
| load average (1, 5, 15 min) | at the start $load_start; at the end $load_end |

Everything runs on loopback: lapse, asynq and river in one Go process, with PostgreSQL and
Redis on the same two cores.

## 1. The ceiling: what this Redis and this PostgreSQL do raw

\`$ceiling_cmd\`

EOF
	cat "$tmp/ceiling.md"
	cat <<'EOF'

A Redis timer is at least one ZADD (scheduled) and one ZREM (taken); the third row is how many
timers per second one Redis could carry if that were all it did, with pipelined requests from
50 connections. The batched cancel is lapse's cancel transaction written as a pgbench script
(`scripts/pgbench_cancel.sql`: 200 orders updated by id list with the status guard, a ledger
row each, the SKU counters locked and updated, an outbox event each), two clients; the create
script is one order per transaction (`scripts/pgbench_create.sql`), the transaction behind
every timer of lapse's sql backend, run with 2 clients and with 10 (as many as lapse's
connection pool; concurrent commits share a WAL flush). Both are leaner than lapse's own
transactions: no JSON of the whole order, no read of the clock, fewer round trips.

EOF
	cat <<EOF
### lapse's creates against this ceiling

\`$creates_cmd\`

| lapse create path (16 goroutines, one item per order) | orders/s | pgbench create, $PG_CREATE_POOL_CLIENTS clients | fraction | pgbench create, 2 clients | fraction |
| --- | ---: | ---: | ---: | ---: | ---: |
EOF
	for c in "lone 1000 one transaction per order, SKU one of 1,000" "group 1000 group commit (the default), SKU one of 1,000" \
		"lone 1 one transaction per order, every order on one SKU" "group 1 group commit, every order on one SKU"; do
		read -r mode skus what <<<"$c"
		v=$(created "$mode" "$skus")
		echo "| $what | $(commas "$v") | $(commas "$PG_CREATE_POOL_TPS") | $(pct "$v" "$PG_CREATE_POOL_TPS") | $(commas "$PG_CREATE_TPS") | $(pct "$v" "$PG_CREATE_TPS") |"
	done
	cat <<'EOF'

lapse commits concurrent creates together (`store/postgres/group.go`): one transaction takes
the group's idempotency keys, locks its SKU rows once, decides in arrival order which orders
fit, and writes every table with one statement, each caller answered after that COMMIT. "One
transaction per order" is the same store with `create_group=1` in its URL. On one SKU, lone
creates queue on that row's lock, one commit at a time; a group holds it once for all its
orders.

EOF
	cat <<EOF
## 2. Side by side: $timers timers due over $over

\`$spread_cmd\`

EOF
	cat "$tmp/spread.md"
	cat <<EOF

## 3. Side by side: $timers timers all due at once

\`$burst_cmd\`

EOF
	cat "$tmp/burst.md"
	lr=$(rate_of burst lapse-redis) lrt=$(rate_of burst lapse-redis-tuned)
	lrs=$(sched_rate lapse-redis) lrts=$(sched_rate lapse-redis-tuned)
	ls=$(rate_of burst lapse-sql) lst=$(rate_of burst lapse-sql-tuned)
	lss=$(sched_rate lapse-sql) lsts=$(sched_rate lapse-sql-tuned)
	row() { # row <what> <figure> <ceiling> <ceiling's name>
		echo "| $1 | $(commas "$2")/s | $(commas "$3")/s ($4) | $(pct "$2" "$3") |"
	}
	cat <<EOF

### lapse as a fraction of the ceiling

From the burst above — every timer scheduled at once (scheduled/s: how fast the system took
them in) and due at once (timers/s: how fast it delivered them) — against the ceiling of
section 1, measured in the same run:

| lapse | measured | ceiling | fraction |
| --- | ---: | ---: | ---: |
EOF
	row "lapse-redis: timers scheduled" "$lrs" "$REDIS_ZADD" "Redis ZADD"
	row "lapse-redis: timers claimed and delivered" "$lr" "$REDIS_ZREM" "Redis ZREM"
	row "lapse-redis-tuned: timers scheduled" "$lrts" "$REDIS_ZADD" "Redis ZADD"
	row "lapse-redis-tuned: timers claimed and delivered" "$lrt" "$REDIS_ZREM" "Redis ZREM"
	row "lapse-sql: orders created" "$lss" "$PG_CREATE_POOL_TPS" "pgbench create, $PG_CREATE_POOL_CLIENTS clients"
	row "lapse-sql: orders claimed and cancelled" "$ls" "$PG_CANCEL_ORDERS" "pgbench batched cancel, 2 clients"
	row "lapse-sql-tuned: orders created" "$lsts" "$PG_CREATE_POOL_TPS" "pgbench create, $PG_CREATE_POOL_CLIENTS clients"
	row "lapse-sql-tuned: orders claimed and cancelled" "$lst" "$PG_CANCEL_ORDERS" "pgbench batched cancel, 2 clients"
	cat <<'EOF'

lapse's Redis timers are scheduled a create group (64 timers) per ScheduleMany; the timers of
the calls in flight go in one script call per shard (ZADD, plus clearing leases and metadata
when the shard has timers in flight), all in one pipeline. They are claimed by one script call
per batch of up to 200 due timers (ZRANGEBYSCORE, ZREM, ZADD to the lease set, metadata) and
acknowledged by another, sent in the round trip of the worker's next claim; redis-benchmark's
ZADD and ZREM are single commands, pipelined 16 deep from 50 connections. lapse's sql timers do the whole order: its creation (SKU row, item, ledger row
and event; concurrent creates share one transaction, group commit) and one transaction per
batch of up to 200 cancels, with the JSON of each order written to the outbox; the default
runs one claimer, pgbench two clients. The ceilings are reference figures, not hard limits:
the pgbench create script commits one order per transaction, which is the point of comparing
with it, and the load of this shared machine moves between measurements taken minutes
apart. A fraction above 100% means lapse matched the reference, not that it beat the server.

EOF
	cat <<'EOF'
## 4. `lapse bench`: the whole service, end to end

Orders created through the service, cancelled by it at their deadline; lateness is
`cancelled_at − cancel_after`, both stamped by the store's clock, and the audit checks every
invariant afterwards.

| command | orders | created/s | lateness p50 / p99 / max (ms) | early | SQL statements per order | audit |
| --- | ---: | ---: | --- | ---: | ---: | --- |
EOF
	for i in "${!benches[@]}"; do
		jq -r --arg cmd "${benches[$i]}" '
			if .error then "| `\($cmd)` | — | — | failed: \(.error | gsub("\n"; " ")) | — | — | — |"
			else "| `\($cmd)` | \(.orders) | \(.created_per_s | round) | \(.lateness_ms.p50) / \(.lateness_ms.p99) / \(.lateness_ms.max) | \(.early) | \(if .db_statements_per_order == null then "—" else (.db_statements_per_order * 10 | round / 10) end) | \(.audit.status) |"
			end' "$tmp/bench$i.json" | sed "s#$pg#postgres://…#g"
	done
	cat <<'EOF'

`postgres://…` is `postgres://postgres@127.0.0.1:5432/test?sslmode=disable` with
`&search_path=` a schema the script creates before the run and drops after. SQL statements
per order counts every statement the store sent during the run (BEGIN and COMMIT included:
creates, cancels, the outbox relay), divided by the orders; group commit and batched cancels
bring it below one.

## 5. Events out: the outbox relay per sink

Each sink alone, with PostgreSQL as the store. *Lag* is from an event's commit (its
`created_at`) to the broker's confirmation (publisher confirm, acks=all, PubAck) while the
service takes 1,000 orders/s (two events each). *Drain* is a backlog of events written with
no relay running, emptied by one relay (three batches of 500 in flight); *plain publisher* is
the broker's own rate measured in the same run with the same message size: one client
publishing batches of 500 and waiting for their confirmations, with no database.

EOF
	echo '| command | events | lag p50 / p99 / max (ms) | drain events/s | plain publisher/s | drain / plain |'
	echo '| --- | ---: | --- | ---: | ---: | ---: |'
	for i in "${!sink_benches[@]}"; do
		jq -r --arg cmd "${sink_benches[$i]}" '
			if .error then "| `\($cmd)` | — | failed: \(.error | gsub("\n"; " ")) | — | — | — |"
			else .relay[0] as $r | "| `\($cmd)` | \($r.events) | \($r.lag_ms.p50) / \($r.lag_ms.p99) / \($r.lag_ms.max) | \($r.drain_per_s | round) | \(($r.raw_per_s // 0) | round) | \(if ($r.raw_per_s // 0) > 0 then (100 * $r.drain_per_s / $r.raw_per_s | round | tostring) + "%" else "—" end) |"
			end' "$tmp/sink$i.json" | sed "s#$pg#postgres://…#g"
	done
	cat <<'EOF'

`kafka://kfake/…` is franz-go's kfake, a three-broker Kafka cluster in the bench's own
process: no Kafka broker can run on this machine, so its plain-publisher figure is an
in-memory fake's and only the relay's side of the row means much. RabbitMQ and NATS are the
machine's servers (RabbitMQ 3.10, a queue of the run's own bound to the exchange;
nats-server 2.9, file storage with the dedupe window). The relay's ceiling is the store's:
each event is a delivery row inserted (fan-out), leased and deleted, and its outbox row
marked twice, per sink, in PostgreSQL; a broker that takes 100,000 messages a second in
memory is faster than that.

EOF
	if [ ${#millions[@]} -gt 0 ]; then
		cat <<'EOF'
## 6. A million pending timers on RabbitMQ

Timers due an hour ahead, all waiting in one level of the ladder (level 15, 54.6 minutes),
published with Schedule from 256 goroutines as lapse serve publishes the timers of the orders
it creates (concurrent calls share batches of confirmed publishes). *Memory* is the broker's
own count (`rabbitmqctl status`, erlang total) before and after, divided by the timers; the
run's queues are deleted afterwards.

| command | timers | published/s | broker memory before → after (MiB) | bytes per timer | queue processes (MiB) | binaries (MiB) | disk before → after (MB) |
| --- | ---: | ---: | --- | ---: | ---: | ---: | --- |
EOF
		for i in "${!millions[@]}"; do
			jq -r --arg cmd "${millions[$i]}" '
				def mib: . / 1048576 | round;
				if .error then "| `\($cmd)` | — | failed: \(.error | gsub("\n"; " ")) | — | — | — | — | — |"
				else "| `\($cmd)` | \(.held) | \(.timers_per_s | round) | \(.memory_before.total | mib) → \(.memory_after.total | mib) | \(.bytes_per_timer | round) | \(((.memory_after.parts.queue_procs // 0) + (.memory_after.parts.quorum_queue_procs // 0)) | mib) | \(.memory_after.parts.binary | mib) | \(.disk_mb_before) → \(.disk_mb_after) |"
				end' "$tmp/million$i.json"
		done
		echo
	fi
	cat <<EOF
## 7. Scale

\`$scale_cmd\`

A schema of the run's own: $(commas "$scale_pending") PENDING orders written by SQL (due a day
ahead, one item each), from which lapse's memory timers and then its Redis timers are seeded
as \`lapse serve\` seeds them at start; then the run's Redis keys are deleted (a data loss) and
the rebuild from the store timed from the deletion. Then $(commas "$scale_history") settled orders (half
paid, half cancelled, with their items and ledger rows, ids random as UUIDs) join them, and
lapse's creates (group commit, 16 goroutines, one item each) are timed on that table and on an
empty one, in turn, three runs each.

EOF
	jq -r 'if .error then "failed: \(.error)" else
		"| measure | figure |",
		"| --- | ---: |",
		"| memory timers: seed of \(.pending_timers) pending orders from PostgreSQL | \(.memory_seed_s * 10 | round / 10) s |",
		"| memory timers: Go heap per pending timer | \(.memory_heap_bytes_per_timer | round) bytes |",
		"| redis timers: seed of \(.pending_timers) pending orders | \(.redis_seed_s * 10 | round / 10) s |",
		"| redis timers: Redis memory per pending timer (MEMORY USAGE of the run'"'"'s keys) | \(.redis_bytes_per_timer | round) bytes |",
		"| redis timers: rebuild after the keys were deleted: the seed / from the deletion | \(.redis_rebuild_s * 10 | round / 10) s / \(.redis_recover_s * 10 | round / 10) s |",
		"| lapse creates/s, empty orders table (runs: \(.creates_per_s_empty_runs)) | \(.creates_per_s_empty | round) |",
		"| lapse creates/s, \(.history_orders + .pending_timers) orders in the table, \(.orders_table_bytes / 1e9 * 10 | round / 10) GB with its indexes (runs: \(.creates_per_s_full_runs)) | \(.creates_per_s_full | round) (\(100 * (.creates_per_s_full / .creates_per_s_empty - 1) | round)%) |",
		"",
		"Load average \(.load_average_start) at the start of this section, \(.load_average_end) at its end."
		end' "$tmp/scale.json"
	cat <<EOF

$(commas "$scale_due") orders due within one second, created ahead (\`--lead $scale_lead\`):

| command | orders | lateness p50 / p99 / max (ms) | drain: last cancel after the last deadline (s) | early | audit |
| --- | ---: | --- | ---: | ---: | --- |
EOF
	for i in "${!due_benches[@]}"; do
		jq -r --arg cmd "${due_benches[$i]}" '
			if .error then "| `\($cmd)` | — | failed: \(.error | gsub("\n"; " ")) | — | — | — |"
			else "| `\($cmd)` | \(.orders) | \(.lateness_ms.p50) / \(.lateness_ms.p99) / \(.lateness_ms.max) | \(.drain_seconds // "—") | \(.early) | \(.audit.status) |"
			end' "$tmp/due$i.json" | sed "s#$pg#postgres://…#g"
	done
	echo
	cat <<'EOF'
## What the numbers mean

**timers/s.** Delivered timers divided by the time from the first due time to the last
delivery. In section 2 the timers fall due at a steady rate, so a system that keeps up shows
that rate and its lateness stays small; one that falls behind shows less, and its lateness grows
towards the end of the window. In section 3 everything is due at once, and the figure is how
fast the system drains a backlog.

**Lateness** is delivery time minus due time, per timer, signed: p50, p99 and the maximum over
all timers. For the systems with a handler (lapse memory and redis, asynq, river) a delivery is
the moment the handler is called, and the handler only notes the time. lapse's sql timers have
no handler: the timer is the order row, and it counts as delivered when the transaction that
claimed it — and cancelled the order, released its stock, wrote its ledger row and its outbox
event — has committed. That is more work per timer than any other row does, and it is lapse's
real cancel path.

**Early** counts deliveries before the due time, with the earliest in brackets. lapse never
fires early: its Redis scores are due times rounded up to the millisecond, and the store
guards `cancel_after <= now`. asynq stores a task's time as whole Unix seconds, truncated, and
forwards every task whose second has begun, so a task can run up to a second before its time;
in the tuned configuration, which forwards every 50 ms, most tasks do. In a cancel service an
early fire is harmless only if the handler checks the deadline again.

**Defaults against tuned.** asynq's default forwarder looks for due tasks every 5 s, so its
timers are up to 5 s late, and its default concurrency is the number of CPUs (2 here). River's
scheduler makes jobs due within the next 5 s available every 5 s (fixed), and its producers
look for available jobs every `FetchPollInterval` (1 s by default) and, while there are more,
at most once per `FetchCooldown` (100 ms), taking up to `MaxWorkers` jobs a time: with
these defaults a timer is up to about a second late while the queue keeps up, a queue runs
about 100 jobs per 100 ms at most (near 1,000 a second), and a timer set less than 5 s ahead
can wait for the scheduler's next run. lapse's memory and redis schedulers sleep until the
next due time, so they need no tuning for lateness; the tuned redis variant only adds workers.
lapse's sql poller sleeps until the next deadline in the table; the tuned variant runs two
instances that share the claims through `FOR UPDATE SKIP LOCKED`.

**CPU s, process** is the CPU time (user + system) of the one Go process while the system ran,
from the first timer scheduled to the last delivered: the system under test **and** the load
generator that schedules the timers and records the deliveries (the same generator for every
system). **CPU s, server** is the server's CPU over the same interval: for PostgreSQL, the
backends serving this run's connections (read from `/proc`; the WAL writer and checkpointer
are not counted); for Redis, all of redis-server, which on a shared machine includes other
clients' commands.

**lapse's sql timers and this machine's limit.** Each sql timer is an order, created through
the store's CreateOrder (concurrent creates are committed together, see section 1). Order
creation, the cancels and the outbox relay compete for the same PostgreSQL on these two
cores, so the sql rows' lateness varies from one run to the next. A note under a table says when creating the orders could not
keep the pace. In the burst, the orders are all created before any is due, and the drain is
the claim-and-cancel transactions alone (and the relay publishing their events).

**Duplicates and missing.** A duplicate is a second delivery of a timer; missing is a timer not
delivered within 30 s of the last due time. No process crashed in these runs, so no lease or
visibility timeout had a reason to run out: a nonzero count in either column is a finding.
EOF
} >"$out"
step "wrote $out"
