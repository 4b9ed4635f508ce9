# Shared by scripts/chaos and scripts/soak (sourced, not run): times, a free loopback port, the
# throwaway cluster with production durability (scripts/lib/durable.bash), and the removal of
# an Installation's Docker objects. The caller sets `drill` (its name, for messages) and runs
# from the checkout's root.

# Times in microseconds (EPOCHREALTIME, bash 5), seconds as decimals for people.
now_us() { local t=$EPOCHREALTIME; echo $(( 10#${t/./} )); }
# %.0f, not %d: mawk's %d stops at 2^31 (2,147 s in microseconds).
us_of() { awk -v s="$1" 'BEGIN { printf "%.0f", s * 1000000 }'; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", (b - a) / 1000000 }'; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# shellcheck source=scripts/lib/durable.bash
. scripts/lib/durable.bash

# Starts the cluster DIR afresh (scripts/pg-stop --reset, scripts/pg-start) with production
# durability (make_durable) and prints its URL; status 1 when the server does not take it.
durable_cluster() {
  local dir=$1 url
  scripts/pg-stop --reset "$dir"
  url=$(scripts/pg-start "$dir") || return 1
  make_durable "$url" || return 1
  echo "$url"
}

# Removes every container and network labelled occ.installation=INSTALLATION; says how many
# networks it removes, and names those it could not.
docker_remove_installation() {
  local installation=$1 ids
  ids=$(docker ps -aq --filter "label=occ.installation=$installation" 2>/dev/null || true)
  [ -z "$ids" ] || docker rm -f $ids >/dev/null 2>&1 || true
  ids=$(docker network ls -q --filter "label=occ.installation=$installation" 2>/dev/null || true)
  [ -z "$ids" ] && return 0
  echo "${drill:-drill}: cleanup: removing $(echo $ids | wc -w) networks labelled occ.installation=$installation" >&2
  docker network rm $ids >/dev/null 2>&1 || true
  ids=$(docker network ls -q --filter "label=occ.installation=$installation" 2>/dev/null || true)
  [ -z "$ids" ] || echo "${drill:-drill}: could not remove networks $ids (label occ.installation=$installation)" >&2
}
