#!/bin/sh
# Makes sure the programs `npm test` needs are installed (run by npm as the `pretest` script).
#
#   redis-server  integration and e2e tests start their own Redis on a free port   (Debian: redis-server)
#   redis-sentinel  the Sentinel failover e2e test runs three of them                (Debian: redis-sentinel)
#   chromium      the dashboard e2e test drives it headless (playwright-core)      (Debian: chromium)
#   initdb        catalogue tests start their own PostgreSQL (test/helpers/postgres.ts)  (Debian: postgresql;
#                 its programs live in /usr/lib/postgresql/<version>/bin, looked for there)
#   python3       the Python SDK e2e test runs the official openai and anthropic packages in a venv
#                 (made by scripts/ensure-python-sdks.sh, run after this one)  (Debian: python3-venv)
#   ip            the partition e2e test puts processes in network namespaces;
#                 it runs only as root, so `ip` is required only as root         (Debian: iproute2)
#   podman, runc, mmdebstrap, docker-compose
#                 the image e2e test builds a base stand-in (mmdebstrap), the image, and runs a
#                 cluster of containers (podman with runc); it runs only as root  (Debian: podman,
#                 runc, mmdebstrap, docker-compose: `docker-compose config` checks the compose file)
#
# When one is missing it runs `apt-get update && apt-get install` itself: as root directly, else
# through `sudo -n` (no password prompt). When it cannot (no apt-get, no root, no password-less
# sudo, or QUOTARING_NO_INSTALL=1) it stops at once and prints the exact command to run.
# Add a test dependency here as "program:debian-package[:root]" (":root": needed only as root).
#
# As root, once podman is there, it also makes sure /etc/containers/containers.conf (or
# QUOTARING_CONTAINERS_CONF) has the two settings podman needs on this kind of machine, adding only
# what is missing: `default_ulimits = []` under [containers] (the default ulimits cannot be set
# here), `cgroup_manager = "cgroupfs"` (no systemd to manage cgroups) and `runtime = "runc"` under
# [engine] (crun, podman's first choice when installed, refuses this machine's hybrid cgroups).
set -eu

DEPS="redis-server:redis-server redis-sentinel:redis-sentinel initdb:postgresql chromium:chromium python3:python3-venv ip:iproute2:root podman:podman:root runc:runc:root mmdebstrap:mmdebstrap:root docker-compose:docker-compose:root"
CONTAINERS_CONF=${QUOTARING_CONTAINERS_CONF:-/etc/containers/containers.conf}

# Adds `$2` under the section `[$1]` of $CONTAINERS_CONF unless a line setting that key is there
# already (anywhere: an operator's own value is kept). Shell built-ins only (no sed or awk needed).
conf_ensure() {
  section=$1 setting=$2 key=${2%% *}
  if [ -f "$CONTAINERS_CONF" ]; then
    while IFS= read -r line || [ -n "$line" ]; do
      line=${line#"${line%%[![:space:]]*}"}
      case "$line" in "$key "*|"$key="*) return 0 ;; esac
    done <"$CONTAINERS_CONF"
  fi
  out="" added=""
  if [ -f "$CONTAINERS_CONF" ]; then
    while IFS= read -r line || [ -n "$line" ]; do
      out="$out$line
"
      if [ -z "$added" ] && [ "$line" = "[$section]" ]; then out="$out$setting
"; added=1; fi
    done <"$CONTAINERS_CONF"
  fi
  [ -n "$added" ] || out="$out[$section]
$setting
"
  printf '%s' "$out" >"$CONTAINERS_CONF"
  echo "npm test: $CONTAINERS_CONF: added $setting under [$section]" >&2
}
ensure_containers_conf() {
  [ "$uid" = 0 ] && command -v podman >/dev/null 2>&1 || return 0
  [ -d "${CONTAINERS_CONF%/*}" ] || return 0
  conf_ensure containers 'default_ulimits = []'
  conf_ensure engine 'cgroup_manager = "cgroupfs"'
  conf_ensure engine 'runtime = "runc"'
}

uid=$(id -u)
missing=""
for dep in $DEPS; do
  program=${dep%%:*}
  rest=${dep#*:}
  package=${rest%%:*}
  case "$rest" in *:root) [ "$uid" = 0 ] || continue ;; esac
  if [ "$program" = initdb ]; then
    # Not on PATH on Debian: /usr/lib/postgresql/<version>/bin (QUOTARING_PG_BIN_GLOB overrides, for tests).
    found=""
    command -v initdb >/dev/null 2>&1 && found=1
    for f in ${QUOTARING_PG_BIN_GLOB:-/usr/lib/postgresql/*/bin}/initdb; do [ -x "$f" ] && found=1; done
    [ -n "$found" ] || missing="$missing $package"
    continue
  fi
  command -v "$program" >/dev/null 2>&1 || missing="$missing $package"
done
if [ -z "$missing" ]; then ensure_containers_conf; exit 0; fi
missing=${missing# }

command_line="apt-get update && apt-get install -y --no-install-recommends $missing"
give_up() {
  echo "npm test: missing test dependencies: $missing ($1)." >&2
  echo "Install them, then run npm test again:" >&2
  if [ "$uid" = 0 ]; then echo "  $command_line" >&2
  else echo "  sudo sh -c '$command_line'" >&2; fi
  exit 1
}

[ "${QUOTARING_NO_INSTALL:-0}" = 1 ] && give_up "QUOTARING_NO_INSTALL=1"
command -v apt-get >/dev/null 2>&1 || give_up "no apt-get here: install them with your package manager"
if [ "$uid" = 0 ]; then
  as_root() { DEBIAN_FRONTEND=noninteractive "$@"; }
elif command -v sudo >/dev/null 2>&1 && sudo -n true >/dev/null 2>&1; then
  as_root() { sudo -n env DEBIAN_FRONTEND=noninteractive "$@"; }
else
  give_up "installing them needs root, and sudo is not available without a password"
fi

echo "npm test: installing test dependencies: $missing" >&2
# shellcheck disable=SC2086 # $missing is a list of package names
as_root apt-get update -q >&2 &&
  as_root apt-get install -y -q --no-install-recommends $missing >&2 ||
  give_up "apt-get failed, see above"
ensure_containers_conf
