# Shared by scripts/bench-queue, scripts/bench-ab and scripts/bench-rollout (sourced, not run),
# from the checkout's root: the bench cluster and the lines that say where a figure was
# measured.

# shellcheck source=scripts/lib/durable.bash
. scripts/lib/durable.bash

# Starts (or finds running) the bench cluster target/pg-bench with production durability
# (make_durable: the runs start only once the server says it is on), and sets `url` (its URL)
# and `pgbin` (the newest PostgreSQL's binaries, pgbench among them).
bench_cluster() {
  url=$(scripts/pg-start target/pg-bench)
  make_durable "$url"
  pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
}

# The machine and the server, one line each, for the report.
bench_describe() {
  echo "machine: nproc=$(nproc); cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'); memory=$(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
  echo "postgresql: $("$pgbin/postgres" --version) ($(durability_settings "$url"))"
}

# The load average, before or after the runs (`bench_load before`).
bench_load() {
  echo "load $1: $(cut -d' ' -f1-3 /proc/loadavg)"
}
