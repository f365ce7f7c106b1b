# syntax=docker/dockerfile:1
# The svc-hub image: `docker build -t svc-hub:dev .` (docs/kubernetes.md).
#
#   build    node:20 with the whole toolchain: npm ci, npm run build (tsc -> dist/), and the SQL and
#            YAML files under src/ that the hub reads at run time, gathered into /out.
#   deps     the production node_modules only (npm ci --omit=dev), on the slim base the image runs on.
#   runtime  node:20 slim: node_modules, package.json, bin/, dist/ and those SQL/YAML files. No
#            TypeScript sources, so bin/svc-hub.js runs the compiled dist/cmd/svc-hub.js (it runs
#            cmd/svc-hub.ts through tsx only when that file exists). Runs as uid 1000, not root.

ARG NODE_VERSION=20
# The lockfile and package.json "allowScripts" are written for npm 11 (strict-allow-scripts in .npmrc);
# node:20 ships npm 10, which would ignore the reviewed install-script list.
ARG NPM_VERSION=11.19.1

FROM node:${NODE_VERSION}-bookworm AS build
ARG NPM_VERSION
WORKDIR /app
RUN npm install --global "npm@${NPM_VERSION}" --no-audit --no-fund
COPY package.json package-lock.json .npmrc ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY types ./types
COPY bin ./bin
COPY src ./src
COPY apiserver ./apiserver
COPY operator ./operator
COPY kube ./kube
COPY cmd ./cmd
RUN npm run build
# What the hub reads from src/ at run time: the migrations (src/**/migrations/**/*.sql) and the event
# module declarations (src/events/modules/*.yaml). Test fixtures stay behind.
RUN mkdir -p /out \
 && find src -type f \( -path '*/migrations/*.sql' -o -path 'src/events/modules/*.yaml' \) -not -path '*/__fixtures__/*' \
      -exec cp --parents {} /out/ \; \
 && test -n "$(find /out/src -name '*.sql')" && test -n "$(find /out/src/events/modules -name '*.yaml')"

FROM node:${NODE_VERSION}-bookworm-slim AS deps
ARG NPM_VERSION
WORKDIR /app
RUN npm install --global "npm@${NPM_VERSION}" --no-audit --no-fund
COPY package.json package-lock.json .npmrc ./
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force

FROM node:${NODE_VERSION}-bookworm-slim AS runtime
ENV NODE_ENV=production \
    SVC_DATA_DIR=/var/lib/svc-hub
WORKDIR /app
# Owned by root and read-only to the process; only the data directory is its own (Kubernetes mounts
# an emptyDir on /tmp and points SVC_DATA_DIR there, with a read-only root filesystem).
COPY --from=deps /app/node_modules ./node_modules
COPY package.json ./
COPY bin ./bin
COPY --from=build /app/dist ./dist
COPY --from=build /out/src ./src
RUN mkdir -p /var/lib/svc-hub && chown 1000:1000 /var/lib/svc-hub \
 && test ! -e cmd && test -f dist/cmd/svc-hub.js
# uid/gid 1000 is the base image's `node` user; numeric so Kubernetes can verify runAsNonRoot.
USER 1000:1000
EXPOSE 8080
# glibc's allocator keeps its mmap threshold fixed (docs/operations.md "The hub's process").
ENV MALLOC_MMAP_THRESHOLD_=131072
ENTRYPOINT ["node", "--max-semi-space-size=64", "--no-allocation-site-pretenuring", "bin/svc-hub.js"]
CMD ["all"]
