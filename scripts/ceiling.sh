#!/usr/bin/env bash
# ceiling.sh — the raw limits of this machine's Redis and PostgreSQL for the
# operations lapse's timers are made of, to read lapse's own figures against:
#
#   Redis:      ZADD and ZREM on one sorted set (redis-benchmark, pipelined)
#   PostgreSQL: pgbench running scripts/pgbench_cancel.sql (lapse's batched
#               timeout cancel, 200 orders per transaction) and
#               scripts/pgbench_create.sql (one order per transaction)
#
#   bash scripts/ceiling.sh [--redis 127.0.0.1:6379/12] [--postgres URL]
#                           [--seconds 10] [--clients 2] [--pool-clients 10]
#                           [--seed 1000000] [--values FILE]
#
# pgbench runs with --clients connections (2: one per core); the create
# script runs a second time with --pool-clients, as many connections as
# lapse's PostgreSQL pool holds (10), since lapse creates orders from many
# goroutines at once and PostgreSQL commits concurrent transactions together.
#
# It prints a markdown table: the exact commands and their figures. With
# --values FILE it also writes the figures as shell assignments (REDIS_ZADD=…)
# for scripts/benchmarks.sh. The sorted set is a key of the run's own,
# deleted after; the tables live in a schema the script creates in the
# --postgres database and drops after. Both servers must be on this machine
# (loopback): this is a load test.
set -euo pipefail
cd "$(dirname "$0")"

redis=127.0.0.1:6379/12
pgurl='postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
seconds=10
clients=2
pool_clients=10
seed=1000000
values=
while [ $# -gt 0 ]; do
	case "$1" in
	--redis) redis=$2; shift 2 ;;
	--postgres) pgurl=$2; shift 2 ;;
	--seconds) seconds=$2; shift 2 ;;
	--clients) clients=$2; shift 2 ;;
	--pool-clients) pool_clients=$2; shift 2 ;;
	--seed) seed=$2; shift 2 ;;
	--values) values=$2; shift 2 ;;
	-h | --help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "ceiling.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done

die() { echo "ceiling.sh: $*" >&2; exit 1; }
for tool in redis-benchmark redis-cli pgbench psql; do
	command -v "$tool" >/dev/null || die "$tool not found (Debian: apt-get install redis-tools postgresql-client postgresql-contrib)"
done
[[ "$seconds" =~ ^[0-9]+$ && "$seconds" -ge 1 && "$seconds" -le 300 ]] || die "--seconds $seconds: want 1 to 300"
[[ "$clients" =~ ^[0-9]+$ && "$clients" -ge 1 && "$clients" -le 64 ]] || die "--clients $clients: want 1 to 64"
[[ "$pool_clients" =~ ^[0-9]+$ && "$pool_clients" -ge 1 && "$pool_clients" -le 64 ]] || die "--pool-clients $pool_clients: want 1 to 64"
[[ "$seed" =~ ^[0-9]+$ && "$seed" -ge 1000 && "$seed" -le 10000000 ]] || die "--seed $seed: want 1000 to 10000000"

# Loopback only.
redis_hostport=${redis%%/*}
redis_db=0
[[ "$redis" == */* ]] && redis_db=${redis##*/}
redis_host=${redis_hostport%:*}
redis_port=${redis_hostport##*:}
[[ "$redis_port" =~ ^[0-9]+$ && "$redis_db" =~ ^[0-9]+$ ]] || die "--redis $redis: want host:port/db"
pg_host=$(sed -E 's#^[a-z]+://([^@/]*@)?(\[[^]]*\]|[^:/?]*).*#\2#' <<<"$pgurl")
for h in "$redis_host" "$pg_host"; do
	case "$h" in
	127.* | localhost | '[::1]' | ::1) ;;
	*) die "$h is not a loopback address: ceiling.sh only loads servers on this machine" ;;
	esac
done

run_id="$$_$(date +%s)"
zkey="lapsecmp-ceiling-$run_id:due"
schema="lapsecmp_ceiling_$run_id"
cleanup() {
	redis-cli -h "$redis_host" -p "$redis_port" -n "$redis_db" DEL "$zkey" >/dev/null 2>&1 || true
	psql "$pgurl" -qAt -c "DROP SCHEMA IF EXISTS $schema CASCADE" >/dev/null 2>&1 || true
}
trap cleanup EXIT

rb() { redis-benchmark -h "$redis_host" -p "$redis_port" --dbnum "$redis_db" --csv "$@" 2>/dev/null; }
rps() { awk -F'","' 'NR == 2 { printf "%d", $2 + 0.5 }'; } # the rps column of redis-benchmark --csv
commas() { sed ':a; s/\B[0-9]\{3\}\>/,&/; ta' <<<"$1"; }
zcard() { redis-cli -h "$redis_host" -p "$redis_port" -n "$redis_db" ZCARD "$zkey"; }

# --- Redis -------------------------------------------------------------------
# Scores and members are random numbers below 200000, so the set grows to
# most of that keyspace; the ZREMs then remove random members, some of which
# are no longer there (reported: a miss costs Redis less than a removal).
zadd_cmd="redis-benchmark -h $redis_host -p $redis_port --dbnum $redis_db -q -n 200000 -P 16 -r 200000 ZADD $zkey __rand_int__ m:__rand_int__"
zrem_cmd="redis-benchmark -h $redis_host -p $redis_port --dbnum $redis_db -q -n 200000 -P 16 -r 200000 ZREM $zkey m:__rand_int__"
echo "ceiling.sh: redis ZADD …" >&2
zadd=$(rb -n 200000 -P 16 -r 200000 ZADD "$zkey" __rand_int__ m:__rand_int__ | rps)
before=$(zcard)
echo "ceiling.sh: redis ZREM …" >&2
zrem=$(rb -n 200000 -P 16 -r 200000 ZREM "$zkey" m:__rand_int__ | rps)
after=$(zcard)
zrem_hit=$(( (before - after) * 100 / 200000 ))
if [ -z "$zadd" ] || [ -z "$zrem" ]; then die "redis-benchmark printed no figure (is Redis up at $redis_host:$redis_port?)"; fi
# A timer costs one ZADD (scheduled) and one ZREM (claimed): the rate at which
# one Redis can do both for every timer.
redis_pair=$(awk -v a="$zadd" -v r="$zrem" 'BEGIN { printf "%d", 1 / (1 / a + 1 / r) }')

# --- PostgreSQL ----------------------------------------------------------------
echo "ceiling.sh: seeding $seed due orders in schema $schema …" >&2
psql "$pgurl" -qAt -v ON_ERROR_STOP=1 >/dev/null <<SQL
CREATE SCHEMA $schema;
SET search_path = $schema;
-- The tables and indexes of lapse's PostgreSQL store (store/postgres/migrations), those the scripts touch.
CREATE TABLE lapse_skus (
    sku text PRIMARY KEY, available bigint NOT NULL CHECK (available >= 0),
    locked bigint NOT NULL DEFAULT 0 CHECK (locked >= 0), sold bigint NOT NULL DEFAULT 0 CHECK (sold >= 0),
    total bigint NOT NULL, updated_at timestamptz NOT NULL);
CREATE TABLE lapse_orders (
    id text PRIMARY KEY,
    status text NOT NULL CHECK (status IN ('PENDING', 'PAYING', 'PAID', 'CANCELLED')),
    amount_cents bigint NOT NULL CHECK (amount_cents >= 0), currency text NOT NULL,
    created_at timestamptz NOT NULL, expires_at timestamptz NOT NULL, cancel_after timestamptz NOT NULL,
    paid_at timestamptz, cancelled_at timestamptz,
    cancel_reason text CHECK (cancel_reason IN ('timeout', 'buyer')), payment_id text,
    refund_required boolean NOT NULL DEFAULT false, payment_attempts integer NOT NULL DEFAULT 0,
    version bigint NOT NULL DEFAULT 1);
CREATE INDEX lapse_orders_status_cancel_after ON lapse_orders (status, cancel_after);
CREATE INDEX lapse_orders_created ON lapse_orders (created_at, id);
CREATE TABLE lapse_order_items (
    order_id text NOT NULL REFERENCES lapse_orders (id), sku text NOT NULL, qty bigint NOT NULL CHECK (qty > 0),
    PRIMARY KEY (order_id, sku));
CREATE TABLE lapse_stock_ledger (
    order_id text NOT NULL, sku text NOT NULL,
    action text NOT NULL CHECK (action IN ('reserve', 'release', 'commit')),
    qty bigint NOT NULL, created_at timestamptz NOT NULL, PRIMARY KEY (order_id, sku, action));
CREATE TABLE lapse_outbox (
    seq bigserial PRIMARY KEY, event_id uuid NOT NULL UNIQUE, type text NOT NULL, order_id text NOT NULL,
    payload json NOT NULL, created_at timestamptz NOT NULL, published_at timestamptz);
CREATE INDEX lapse_outbox_unpublished ON lapse_outbox (seq) WHERE published_at IS NULL;
CREATE INDEX lapse_outbox_order ON lapse_outbox (order_id, type);
CREATE SEQUENCE ceiling_batch MINVALUE 0 START 0;
CREATE SEQUENCE ceiling_order;
-- 1000 SKUs holding the seeded orders' units as locked.
INSERT INTO lapse_skus (sku, available, locked, total, updated_at)
SELECT 'sku-' || lpad(g::text, 4, '0'), 1000000000, $seed, 1000000000 + $seed, now() FROM generate_series(0, 999) AS g;
-- The due orders o0, o1, …: PENDING, past their deadline, in deadline order; one item each.
INSERT INTO lapse_orders (id, status, amount_cents, currency, created_at, expires_at, cancel_after)
SELECT 'o' || g, 'PENDING', 1000, 'USD', now() - interval '1 hour', now() - interval '1 minute',
       now() - interval '1 minute' + g * interval '1 microsecond'
FROM generate_series(0, $seed - 1) AS g;
INSERT INTO lapse_order_items (order_id, sku, qty)
SELECT 'o' || g, 'sku-' || lpad((g % 1000)::text, 4, '0'), 1 FROM generate_series(0, $seed - 1) AS g;
VACUUM ANALYZE;
SQL

pgbench_cmd() { # pgbench_cmd <script> <clients>
	local j=$(( $2 < clients ? $2 : clients ))
	echo "PGOPTIONS='-c search_path=$schema' pgbench -n -M simple -c $2 -j $j -T $seconds -f scripts/$1 '$pgurl'"
}
tps() { # tps <script> <clients>: run pgbench, print its tps
	local j=$(( $2 < clients ? $2 : clients ))
	PGOPTIONS="-c search_path=$schema" pgbench -n -M simple -c "$2" -j "$j" -T "$seconds" -f "$1" "$pgurl" 2>&1 |
		awk '/^tps = / { printf "%d", $3 + 0.5 }'
}
echo "ceiling.sh: pgbench pgbench_cancel.sql, ${seconds}s …" >&2
cancel_tps=$(tps pgbench_cancel.sql "$clients")
batches=$(psql "$pgurl" -qAt -c "SELECT last_value + 1 FROM $schema.ceiling_batch")
cancelled=$(psql "$pgurl" -qAt -c "SELECT count(*) FROM $schema.lapse_orders WHERE status = 'CANCELLED'")
[ -n "$cancel_tps" ] || die "pgbench printed no tps for pgbench_cancel.sql"
[ "$batches" -le $((seed / 200)) ] || die "the seed of $seed orders ran out after $cancelled cancels: rerun with a larger --seed"
echo "ceiling.sh: pgbench pgbench_create.sql, ${seconds}s, $clients clients …" >&2
create_tps=$(tps pgbench_create.sql "$clients")
echo "ceiling.sh: pgbench pgbench_create.sql, ${seconds}s, $pool_clients clients …" >&2
create_pool_tps=$(tps pgbench_create.sql "$pool_clients")
if [ -z "$create_tps" ] || [ -z "$create_pool_tps" ]; then die "pgbench printed no tps for pgbench_create.sql"; fi
cancel_orders=$((cancel_tps * 200))

echo "| ceiling | command | figure |"
echo "| --- | --- | ---: |"
echo "| Redis ZADD | \`$zadd_cmd\` | $(commas "$zadd") ops/s |"
echo "| Redis ZREM | \`$zrem_cmd\` (${zrem_hit}% removed a member) | $(commas "$zrem") ops/s |"
echo "| Redis, one ZADD + one ZREM per timer | 1 / (1/ZADD + 1/ZREM) | $(commas "$redis_pair") timers/s |"
echo "| PostgreSQL batched cancel (200 orders per transaction), $clients clients | \`$(pgbench_cmd pgbench_cancel.sql "$clients")\` | $(commas "$cancel_tps") tps = $(commas "$cancel_orders") orders/s |"
echo "| PostgreSQL order create (one per transaction), $clients clients | \`$(pgbench_cmd pgbench_create.sql "$clients")\` | $(commas "$create_tps") tps = orders/s |"
echo "| PostgreSQL order create (one per transaction), $pool_clients clients | \`$(pgbench_cmd pgbench_create.sql "$pool_clients")\` | $(commas "$create_pool_tps") tps = orders/s |"
echo
echo "The cancel run cancelled $(commas "$cancelled") of $(commas "$seed") seeded due orders, in $(commas "$batches") batches of 200 ids."

if [ -n "$values" ]; then
	cat >"$values" <<-EOF
		REDIS_ZADD=$zadd
		REDIS_ZREM=$zrem
		REDIS_PAIR=$redis_pair
		PG_CANCEL_TPS=$cancel_tps
		PG_CANCEL_ORDERS=$cancel_orders
		PG_CREATE_TPS=$create_tps
		PG_CREATE_POOL_TPS=$create_pool_tps
		PG_CREATE_POOL_CLIENTS=$pool_clients
	EOF
fi
