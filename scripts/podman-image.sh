#!/bin/sh
# Builds quotaring's container image with podman on a machine that reaches no image registry (as
# root; podman with runc, and the containers.conf settings of scripts/ensure-test-deps.sh).
#
#   sh scripts/podman-image.sh base    the base: a stand-in for node:20-bookworm-slim
#   sh scripts/podman-image.sh redis   Redis: the base plus Debian's redis-server
#   sh scripts/podman-image.sh image   the project's image from the Dockerfile, unchanged (quotaring:local)
#
# Each prints the tag it built on stdout (progress goes to stderr); `image` builds the base first.
#
# The base stand-in (docs/deploy.md, "The image built here"): a Debian bookworm root made by
# `mmdebstrap --variant=minbase` from this machine's Debian mirror, imported with `podman import`,
# with this machine's own Node.js binary and npm and a `node` user of uid 1000, like the official
# image's. It is tagged with the Node binary's version (localhost/quotaring-base:node-v20.x.y) and
# built only when `podman image exists` finds no image of that tag: a new Node binary makes a new base.
# Redis's image is keyed the same way (localhost/quotaring-redis:node-v20.x.y); like the official
# redis image, it runs `redis-server` with protected mode off (other containers connect without a
# password), so it can also stand in for `redis:7` (`podman tag … localhost/redis:7`) in compose.
#
# The project's image: `podman build --format docker` (podman's own OCI format drops HEALTHCHECK),
# `--network host`, the base through `--build-arg NODE_IMAGE`, and this machine's CA bundle mounted
# into the build (with an npmrc naming it) so that `npm ci` reaches the npm registry through the
# machine's TLS proxy. Podman's layer cache makes a rebuild with unchanged sources take seconds.
#
# Environment: QUOTARING_IMAGE (default quotaring:local), QUOTARING_DEBIAN_MIRROR (default: the
# first URIs of /etc/apt/sources.list.d/debian.sources, else http://deb.debian.org/debian),
# QUOTARING_CA_BUNDLE (default /etc/ssl/certs/ca-certificates.crt).
set -eu
cd "$(dirname "$0")/.."

IMAGE=${QUOTARING_IMAGE:-quotaring:local}
CA=${QUOTARING_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
NODE_BIN=$(command -v node)
NODE_VERSION=$("$NODE_BIN" --version)
NODE_PREFIX=$(dirname "$(dirname "$(readlink -f "$NODE_BIN")")")
BASE=localhost/quotaring-base:node-$NODE_VERSION
REDIS=localhost/quotaring-redis:node-$NODE_VERSION

mirror() {
  if [ -n "${QUOTARING_DEBIAN_MIRROR:-}" ]; then echo "$QUOTARING_DEBIAN_MIRROR"; return; fi
  uris=""
  [ -f /etc/apt/sources.list.d/debian.sources ] &&
    uris=$(grep -m1 '^URIs:' /etc/apt/sources.list.d/debian.sources | cut -d' ' -f2)
  echo "${uris:-http://deb.debian.org/debian}"
}

build_base() {
  if podman image exists "$BASE"; then echo "$BASE"; return; fi
  npm_dir="$NODE_PREFIX/lib/node_modules/npm"
  [ -d "$npm_dir" ] || { echo "podman-image.sh: npm not found at $npm_dir" >&2; exit 1; }
  echo "podman-image.sh: building $BASE (mmdebstrap from $(mirror), Node $NODE_VERSION from $NODE_BIN)" >&2
  # Valid-Until off: the machine's mirror may serve a snapshot whose Release files have expired.
  mmdebstrap --variant=minbase --quiet \
    --aptopt='Acquire::Check-Valid-Until "false"' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --customize-hook="copy-in $NODE_BIN /usr/local/bin" \
    --customize-hook='mkdir -p "$1/usr/local/lib/node_modules"' \
    --customize-hook="copy-in $npm_dir /usr/local/lib/node_modules" \
    --customize-hook='ln -s ../lib/node_modules/npm/bin/npm-cli.js "$1/usr/local/bin/npm"' \
    --customize-hook='ln -s ../lib/node_modules/npm/bin/npx-cli.js "$1/usr/local/bin/npx"' \
    --customize-hook='chroot "$1" groupadd --gid 1000 node' \
    --customize-hook='chroot "$1" useradd --uid 1000 --gid node --shell /bin/bash --create-home node' \
    --customize-hook='rm -rf "$1/var/lib/apt/lists/"* "$1/var/cache/apt/"*.bin' \
    bookworm - "$(mirror)" </dev/null |
    podman import \
      --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change "ENV NODE_VERSION=${NODE_VERSION#v}" \
      --change 'CMD ["node"]' \
      --message "stand-in for node:20-bookworm-slim: mmdebstrap minbase bookworm + Node $NODE_VERSION" \
      - "$BASE" >&2
  echo "$BASE"
}

build_redis() {
  build_base >/dev/null
  if podman image exists "$REDIS"; then echo "$REDIS"; return; fi
  echo "podman-image.sh: building $REDIS" >&2
  context=$(mktemp -d)
  printf '%s\n' "FROM $BASE" \
    'RUN apt-get update -q && apt-get install -y -q --no-install-recommends redis-server && rm -rf /var/lib/apt/lists/*' \
    'USER 1000:1000' \
    'ENTRYPOINT ["/bin/sh", "-c", "if [ \"$1\" = redis-server ]; then shift; exec redis-server --protected-mode no \"$@\"; fi; exec \"$@\"", "entrypoint"]' \
    'CMD ["redis-server"]' |
    podman build --quiet --format docker --network host -t "$REDIS" -f - "$context" >&2
  rmdir "$context"
  echo "$REDIS"
}

build_image() {
  base=$(build_base)
  npmrc=$(mktemp)
  trap 'rm -f "$npmrc"' EXIT
  echo "cafile=/etc/ssl/certs/ca-certificates.crt" >"$npmrc"
  chmod 644 "$npmrc"
  echo "podman-image.sh: building $IMAGE from $base" >&2
  podman build --format docker --network host \
    --build-arg NODE_IMAGE="$base" \
    -v "$CA:/etc/ssl/certs/ca-certificates.crt:ro" -v "$npmrc:/usr/local/etc/npmrc:ro" \
    -t "$IMAGE" . >&2
  echo "$IMAGE"
}

[ $# -gt 0 ] || { echo "usage: sh scripts/podman-image.sh base|redis|image" >&2; exit 2; }
for what in "$@"; do
  case "$what" in
    base) build_base ;;
    redis) build_redis ;;
    image) build_image ;;
    *) echo "podman-image.sh: unknown target $what (base, redis or image)" >&2; exit 2 ;;
  esac
done
