# syntax=docker/dockerfile:1
# The quotaring image: one image for gateway nodes, routers and the provider simulator (the
# command chooses: `node`, `router`, `simulate`, `demo`, `config check`). Multi-stage: the build
# stage compiles TypeScript with the dev dependencies; the runtime stage holds only the production
# dependencies, the compiled `dist/`, the Lua scripts and the demo config, and runs as the
# unprivileged `node` user (uid 1000) of the official Node image.
# Built and run here with podman (no Docker engine, no image registry): scripts/podman-image.sh
# builds it from a stand-in base, and test/e2e/image.test.ts runs a cluster of its containers.
# test/unit/container-image.test.ts parses this file and checks what it promises (stages, user,
# ports, HEALTHCHECK, what is copied).
ARG NODE_IMAGE=node:20-bookworm-slim

FROM ${NODE_IMAGE} AS build
WORKDIR /src
COPY package.json package-lock.json ./
# --ignore-scripts: `prepare` (the build) runs below, once the sources are here.
RUN npm ci --no-audit --no-fund --ignore-scripts
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
COPY cluster ./cluster
RUN npm run build

FROM ${NODE_IMAGE} AS prod-deps
WORKDIR /src
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund --ignore-scripts

FROM ${NODE_IMAGE} AS runtime
ENV NODE_ENV=production
WORKDIR /app
COPY --from=prod-deps /src/node_modules ./node_modules
COPY --from=build /src/dist ./dist
COPY package.json ./
COPY lua ./lua
COPY cluster/demo.yaml ./cluster/demo.yaml
# The working directory of the processes: server.state_dir (default .quotaring-state) is relative
# to it, so it must be writable by the runtime user (and is the only writable path it needs).
RUN mkdir -p /var/lib/quotaring && chown 1000:1000 /var/lib/quotaring
WORKDIR /var/lib/quotaring
USER 1000:1000
# 8080: the API of a node or a router (server.port / router.port) with /healthz, /readyz, /metrics;
# 9100: a node's admin API (admin.port); 9200: a router's admin API and dashboard (admin.router_port).
# Keep 9100/9200 and the nodes' 8080 private (docs/deploy.md, "Ports").
EXPOSE 8080 9100 9200
# Ready = listening, in the ring, handoffs received, Redis scripts loaded (a node); ring not empty (a router).
# It asks the port in QUOTARING_HEALTH_PORT (default 8080): set it to the node's or router's port
# when it is not 8080 (`--port`, server.port / router.port). Podman keeps HEALTHCHECK only when it
# builds in Docker's format (`podman build --format docker`).
HEALTHCHECK --interval=5s --timeout=3s --start-period=10s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + (process.env.QUOTARING_HEALTH_PORT || 8080) + '/readyz').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
ENTRYPOINT ["node", "/app/dist/src/cli.js"]
CMD ["--help"]
