#!/usr/bin/env bash
# What the test suite needs on this machine, installed and started if missing (idempotent: what is
# there is left alone). `make test` runs it first; so does `.ci/run`, through `make test`.
#
# - Debian packages: bubblewrap (the process sandbox tier), docker.io (the Docker tier's daemon),
#   debootstrap (builds the sandbox image locally), postgresql (business-write tests), docker-compose
#   (validates docker-compose.temporal.yml), chromium and chromium-driver (the web inbox's browser
#   tests), prometheus (its promtool checks the shipped alert rules), redis-server (the Redis Streams
#   backend's tests start a throwaway one), nodejs and npm (the TypeScript client's build and tests;
#   Debian's Node 18 is enough). Installed with apt-get when
#   running as root; otherwise named, and the tests that need them fail rather than skip.
# - The Docker daemon, started in the background when none answers.
# - The sandbox image (`agent-worker sandbox-image`), built once and cached by the daemon.
# - The TypeScript client (clients/typescript): its pinned npm packages (`npm ci`, again only when
#   package-lock.json changed) and its build (`tsc`).
# - The AG-UI example (clients/agui-node): its pinned `@ag-ui/client` (`npm ci`, again only when its
#   package-lock.json changed), for tests/test_agui.py.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
export DEBIAN_FRONTEND=noninteractive

need=()
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
command -v docker-compose >/dev/null 2>&1 || need+=(docker-compose)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need+=(chromium-driver)
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v node >/dev/null 2>&1 || need+=(nodejs)
command -v npm >/dev/null 2>&1 || need+=(npm)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "test-machine: installing ${need[*]}"
    apt-get update -q >/dev/null
    apt-get install -y -q "${need[@]}" >/dev/null
  else
    echo "test-machine: missing ${need[*]}; install them (as root: apt-get install ${need[*]})" >&2
    exit 1
  fi
fi
# Fail early, with a clear message, where bubblewrap cannot isolate (an unprivileged container, say).
bwrap --ro-bind / / --unshare-all --unshare-user --uid 65534 true \
  || { echo "test-machine: bubblewrap cannot create namespaces here" >&2; exit 1; }

if ! docker info >/dev/null 2>&1; then
  echo "test-machine: starting dockerd (log: /tmp/dockerd.log)"
  (dockerd >/tmp/dockerd.log 2>&1 &)
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { tail -20 /tmp/dockerd.log >&2; exit 1; }
fi
"$BIN/agent-worker" sandbox-image

# The TypeScript client: npm's own record of the install (node_modules/.package-lock.json) is newer
# than the lock file when nothing changed since.
(
  cd clients/typescript
  [ node_modules/.package-lock.json -nt package-lock.json ] || npm ci --no-audit --no-fund --loglevel=error
  npm run --silent build
)
(
  cd clients/agui-node
  [ node_modules/.package-lock.json -nt package-lock.json ] || npm ci --no-audit --no-fund --loglevel=error
)
