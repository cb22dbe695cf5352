# The production image of a cell: `docker build -t queen-kv:0.1.0 .` One image, three commands:
#   node dist/services/api/main.js       the API (the default; Procfile `web`)
#   node dist/services/sweeper/main.js   the sweeper (Procfile `sweeper`)
#   node dist/services/migrate.js        the release command (Procfile `release`, the migrate Job)
# It needs DATABASE_URL: the embedded PostgreSQL of `npm start` is a dev dependency and is not in it.
# No HEALTHCHECK: the orchestrator probes (deploy/k8s: /ready and /metrics on 6632, /health on 6633).

# Build stage: every dependency (TypeScript is a dev one), then tsc into dist/.
FROM node:24-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
# The client is an npm workspace: npm ci needs its package.json (the processes never load it).
COPY client/package.json ./client/
# No install scripts: the build needs only tsc (the one allowed script restores the embedded
# PostgreSQL's library links, for tests, which do not run here).
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY shared ./shared
COPY services ./services
# The API description, turned into dist/openapi.json by the build (GET /api/v1/openapi.json).
COPY docs/openapi.yaml ./docs/
COPY scripts/openapi-json.mjs ./scripts/
# The processes only (tsconfig.build.json: services/ and shared/), type-checked.
RUN npm run build:runtime

# Runtime stage: production dependencies only, the compiled processes and the schema files.
FROM node:24-bookworm-slim AS runtime
ENV NODE_ENV=production
WORKDIR /app
COPY package.json package-lock.json ./
# The workspace's manifest only, so that npm ci resolves it; the processes never load the client.
COPY client/package.json ./client/
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund && npm cache clean --force
COPY --from=build /app/dist/shared ./dist/shared
COPY --from=build /app/dist/services ./dist/services
COPY --from=build /app/dist/openapi.json ./dist/
COPY sql ./sql
# The base image's `node` user, by number so that runAsNonRoot can verify it; the files stay
# root's and read-only to it (the pods run with readOnlyRootFilesystem).
USER 1000:1000
EXPOSE 6632 6633
CMD ["node", "dist/services/api/main.js"]
