#!/usr/bin/env bash
# Queen MQ's client test modules against a running cell (docs/log-and-transactions.md, "Queen's
# client"). Needs a checkout of https://github.com/queen-mq/queen; its client's dependencies
# (axios, pg, uuid) are installed from the npm registry into that folder if missing.
#
#   scripts/queen-client-tests.sh /path/to/queen/clients/client-js [module ...]
#
# QUEEN_URL defaults to http://127.0.0.1:6632 (npm start). Start the cell on a fresh database.
set -euo pipefail
dir="${1:?usage: scripts/queen-client-tests.sh <path to queen/clients/client-js> [module ...]}"
shift
if [ ! -d "$dir/node_modules/axios" ]; then
  (cd "$dir" && npm install --omit=dev --no-audit --no-fund --ignore-scripts)
fi
exec node "$(dirname "$0")/queen-client-tests.mjs" "$dir" "$@"
