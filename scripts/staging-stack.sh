#!/usr/bin/env bash
# An off-the-shelf staging stack on loopback, for proving the trigger test on a stack the kit did
# not write (issue 29): a Python WSGI app under waitress with ONE worker thread (a FIFO of about
# 95 requests/s that finishes abandoned work), behind nginx retrying timed-out tries with
# proxy_next_upstream, both counted by Prometheus (Debian's) scraping every second. Its series
# follow the label conventions of the kit's retry-debt rules (k8s/prometheus/README.md), in
# namespace "staging": nginx logs each request's x-request-id, x-attempt and tries, and its
# exporter counts every try as http_requests_total{job="app", attempt} (the nginx job scrapes
# with honor_labels); nginx sets X-Request-Start, from which the app measures its queue time,
# beside its busy time and readiness. falsification/tests/data/stack/retry-debt-mapping.yaml
# maps the rest; pass it after the kit's rule file to get the alert.
#
#   scripts/staging-stack.sh up DIR [RULE_FILE...]   start it (idempotent), write DIR/stack.env
#   scripts/staging-stack.sh down DIR                stop it, check nothing is left
#
# up installs what is missing (nginx-light and prometheus with apt, without starting their
# system services; waitress and prometheus-client, pinned with hashes in
# falsification/tests/data/stack/requirements.txt, into a venv cached under
# /var/cache/retry-debt-kit/staging-venv keyed by that file and the Python version), writes the
# configurations into DIR, starts the four processes on free loopback ports, waits until each
# answers and Prometheus has scraped both targets, and writes DIR/stack.env:
#   APP_URL (the app direct), APP_METRICS_URL, NGINX_URL (the target: nginx in front of the app),
#   NGINX_STATUS_URL, NGINX_EXPORTER_URL, PROMETHEUS_URL, NAMESPACE, the stack's settings
#   (NGINX_TRIES, NGINX_TRY_TIMEOUT_MS, APP_CPU_MS, APP_THREADS) and the processes' PIDs.
# RULE_FILEs are loaded by Prometheus (rule_files), evaluated every second.
#
# Settings, from the environment: STACK_APP_CPU_MS (10: how long the worker spins per request),
# STACK_NGINX_TRIES (3: nginx tries per client request; the upstream lists the app that many
# times, since nginx tries each server of the group at most once per request), and
# STACK_NGINX_TRY_TIMEOUT_MS (200: proxy_connect/read_timeout, the per-try timeout).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
data=$repo/falsification/tests/data/stack

# The stack, for scripts/lib/loopback-stack.sh: its processes in start order (each has DIR/NAME.pid
# and DIR/NAME.log), the files in DIR they are started with (what names them in their command
# lines), what down removes besides stack.env and ports, and the logs a failed up shows.
stack_script=staging-stack.sh
names=(app nginx exporter prometheus)
stack_files=(app.py nginx.conf nginx_exporter.py prometheus.yml)
stack_clean=(prometheus-data nginx-tmp)
stack_logs=("${names[@]}")
# shellcheck source=scripts/lib/loopback-stack.sh
. scripts/lib/loopback-stack.sh

usage() { die "usage: $0 up DIR [RULE_FILE...] | down DIR"; }
(($# >= 2)) || usage
cmd=$1
stack_dir "$cmd" "$2"
shift 2

up() {
  local rules=() f
  for f in "$@"; do
    [[ -f $f ]] || die "rule file $f: not found"
    rules+=("$(cd "$(dirname "$f")" && pwd -P)/$(basename "$f")")
  done
  if already_up; then return 0; fi
  down

  command -v curl >/dev/null || apt_install curl
  apt_install nginx-light prometheus
  local py
  py=$(venv staging-venv "$data/requirements.txt" 'waitress, prometheus_client')

  local cpu_ms=${STACK_APP_CPU_MS:-10} tries=${STACK_NGINX_TRIES:-3} try_ms=${STACK_NGINX_TRY_TIMEOUT_MS:-200}
  local namespace=staging
  [[ $tries =~ ^[1-9][0-9]?$ ]] || die "STACK_NGINX_TRIES: $tries is not 1-99"
  [[ $try_ms =~ ^[1-9][0-9]*$ ]] || die "STACK_NGINX_TRY_TIMEOUT_MS: $try_ms is not a positive integer"
  local ports app app_metrics ngx status exporter prom
  ports=$(free_ports 6)
  echo "$ports" >"$dir/ports"
  read -r app app_metrics ngx status exporter prom <<<"$ports"

  # The app and the exporter run from DIR, so their command lines name it. A fresh access log:
  # the exporter counts it from the start.
  cp "$data/app.py" "$data/nginx_exporter.py" "$dir/"
  rm -f "$dir/nginx-access.log"
  mkdir -p "$dir/nginx-tmp" "$dir/prometheus-data"

  local servers="" i
  for ((i = 0; i < tries; i++)); do
    servers+="        server 127.0.0.1:$app max_fails=0;"$'\n'
  done
  cat >"$dir/nginx.conf" <<EOF
# The gateway: one worker; the upstream lists the app's one address $tries times, since nginx
# passes a failed try to the NEXT server of the group and tries each server once per request
# (proxy_next_upstream_tries alone, over a single server line, makes one try). max_fails=0: no
# passive health check, which would otherwise bench the app after a timeout and answer 502
# without trying it.
worker_processes 1;
daemon off;
pid $dir/nginx-tmp/nginx.pid;
error_log $dir/nginx-error.log warn;
worker_rlimit_nofile 10000;
events { worker_connections 4096; }
http {
    # One line per client request, its tries last: the exporter counts them, as
    # http_requests_total{job=<upstream group>, attempt} by the client's request id and attempt.
    log_format tries '\$msec \$status \$request_time "\$upstream_status" '
                     '"\$proxy_host" "\$http_x_request_id" "\$http_x_attempt" "\$upstream_addr"';
    access_log $dir/nginx-access.log tries;
    client_body_temp_path $dir/nginx-tmp/body;
    proxy_temp_path $dir/nginx-tmp/proxy;
    fastcgi_temp_path $dir/nginx-tmp/fastcgi;
    uwsgi_temp_path $dir/nginx-tmp/uwsgi;
    scgi_temp_path $dir/nginx-tmp/scgi;
    upstream app {
$servers    }
    server {
        listen 127.0.0.1:$ngx;
        location / {
            proxy_pass http://app;
            proxy_connect_timeout ${try_ms}ms;
            proxy_send_timeout ${try_ms}ms;
            proxy_read_timeout ${try_ms}ms;
            proxy_next_upstream error timeout http_502 http_503 http_504;
            proxy_next_upstream_tries $tries;
            # When nginx sent the request on (unix seconds): the app's queue-time histogram.
            proxy_set_header X-Request-Start "t=\${msec}";
        }
    }
    server {
        listen 127.0.0.1:$status;
        access_log off;
        location = /stub_status { stub_status; }
    }
}
EOF

  {
    echo "# Written by scripts/staging-stack.sh: the app and nginx's exporter, every second."
    echo "global:"
    echo "  scrape_interval: 1s"
    echo "  scrape_timeout: 900ms"
    echo "  evaluation_interval: 1s"
    if ((${#rules[@]})); then
      echo "rule_files:"
      for f in "${rules[@]}"; do echo "  - \"$f\""; done
    fi
    echo "# Both targets in one namespace, as the retry-debt rules aggregate by (namespace, job)."
    echo "scrape_configs:"
    echo "  - job_name: app"
    echo "    static_configs: [{targets: [\"127.0.0.1:$app_metrics\"], labels: {namespace: $namespace}}]"
    echo "  # honor_labels: the exporter's http_requests_total{job=\"app\", attempt} counts the tries"
    echo "  # nginx sent to the app, and belongs to the app's job; nginx's own series get job nginx."
    echo "  - job_name: nginx"
    echo "    honor_labels: true"
    echo "    static_configs: [{targets: [\"127.0.0.1:$exporter\"], labels: {namespace: $namespace}}]"
  } >"$dir/prometheus.yml"

  start app "$py" "$dir/app.py" --listen "127.0.0.1:$app" --metrics "127.0.0.1:$app_metrics" \
    --cpu-ms "$cpu_ms" --threads 1
  start nginx nginx -p "$dir/" -c "$dir/nginx.conf" -e "$dir/nginx-error.log"
  start exporter "$py" "$dir/nginx_exporter.py" --status "http://127.0.0.1:$status/stub_status" \
    --listen "127.0.0.1:$exporter" --access-log "$dir/nginx-access.log"
  start prometheus prometheus --config.file="$dir/prometheus.yml" \
    --storage.tsdb.path="$dir/prometheus-data/" --storage.tsdb.retention.time=1d \
    --web.listen-address="127.0.0.1:$prom" --log.level=warn

  wait_curl app 20 "http://127.0.0.1:$app_metrics/metrics"
  wait_curl app 20 "http://127.0.0.1:$app/work"
  wait_curl nginx 20 "http://127.0.0.1:$ngx/work"
  wait_curl exporter 20 "http://127.0.0.1:$exporter/metrics"
  wait_curl prometheus 60 "http://127.0.0.1:$prom/-/ready"
  # Both targets scraped and up, so a query finds its series from the first second.
  local q deadline=$((SECONDS + 30))
  until q=$(curl -fsS -m 2 "http://127.0.0.1:$prom/api/v1/query" --data-urlencode 'query=count(up == 1)' 2>/dev/null) &&
    [[ $q == *'"value":['*',"2"]'* ]]; do
    ((SECONDS < deadline)) || failed "Prometheus did not scrape both targets in 30 s: $q"
    sleep 0.3
  done
  all_running

  cat >"$dir/stack.env.new" <<EOF
# Written by scripts/staging-stack.sh up; sourced by down.
APP_URL=http://127.0.0.1:$app/work
APP_METRICS_URL=http://127.0.0.1:$app_metrics/metrics
NGINX_URL=http://127.0.0.1:$ngx/work
NGINX_STATUS_URL=http://127.0.0.1:$status/stub_status
NGINX_EXPORTER_URL=http://127.0.0.1:$exporter/metrics
PROMETHEUS_URL=http://127.0.0.1:$prom
NAMESPACE=$namespace
APP_CPU_MS=$cpu_ms
APP_THREADS=1
NGINX_TRIES=$tries
NGINX_TRY_TIMEOUT_MS=$try_ms
APP_PID=$(<"$dir/app.pid")
NGINX_PID=$(<"$dir/nginx.pid")
EXPORTER_PID=$(<"$dir/exporter.pid")
PROMETHEUS_PID=$(<"$dir/prometheus.pid")
EOF
  mv "$dir/stack.env.new" "$dir/stack.env"
  log "up in $dir: nginx http://127.0.0.1:$ngx/work, Prometheus http://127.0.0.1:$prom"
}

case $cmd in
  up) up "$@" ;;
  down)
    (($# == 0)) || usage
    if [[ ! -f $dir/stack.env && ! -f $dir/ports && -z $(leftovers) ]] &&
      ! ls "$dir"/*.pid >/dev/null 2>&1; then
      log "nothing to stop in $dir"
      exit 0
    fi
    down
    log "down: nothing of the stack in $dir is left"
    ;;
  *) usage ;;
esac
