# Shared by scripts/lib/drill.bash and scripts/lib/bench.bash (sourced, not run): production
# durability on a cluster that scripts/pg-start started (its postgresql.conf turns it off, for
# the tests' speed).

# Turns fsync, synchronous_commit and full_page_writes on for the cluster at URL (ALTER SYSTEM,
# so they stay on across restarts) and waits until the server says all three are on; status 1
# when it does not, naming what it read. Prints nothing on stdout.
make_durable() {
  local url=$1 durability=""
  psql -X -q "$url" -c "ALTER SYSTEM SET fsync = on" -c "ALTER SYSTEM SET synchronous_commit = on" \
    -c "ALTER SYSTEM SET full_page_writes = on" -c "SELECT pg_reload_conf()" >/dev/null || return 1
  for _ in $(seq 1 50); do
    durability=$(durability_settings "$url")
    [ "$durability" = "fsync=on, synchronous_commit=on, full_page_writes=on" ] && return 0
    sleep 0.1
  done
  echo "$(basename "$0"): the cluster did not take fsync/synchronous_commit/full_page_writes on (got $durability)" >&2
  return 1
}

# The three settings make_durable turns on, as the server reads them now, in one line for a
# report: `fsync=on, synchronous_commit=on, full_page_writes=on`. Bounded as the drills bound
# every query of theirs (`q`), so a hung server cannot hang a report.
durability_settings() {
  timeout 120 psql -X -At "$1" -c "SELECT 'fsync=' || current_setting('fsync') || ', synchronous_commit=' || current_setting('synchronous_commit') || ', full_page_writes=' || current_setting('full_page_writes')"
}
