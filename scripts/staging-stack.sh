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

die() { echo "staging-stack.sh: $*" >&2; exit 1; }
log() { echo "staging-stack.sh: $*" >&2; }

usage() { die "usage: $0 up DIR [RULE_FILE...] | down DIR"; }
(($# >= 2)) || usage
cmd=$1
if [[ $cmd == down && ! -d $2 ]]; then
  log "nothing to stop in $2"
  exit 0
fi
mkdir -p "$2"
dir=$(cd "$2" && pwd -P)
shift 2

# The processes of the stack, in start order; each has DIR/NAME.pid.
names=(app nginx exporter prometheus)

# What names this stack in its processes' command lines: the files each was started with.
marks() { printf '%s\n' "$dir/app.py" "$dir/nginx.conf" "$dir/nginx_exporter.py" "$dir/prometheus.yml"; }

# Whether PID's command line names one of this stack's files.
ours() { tr '\0' ' ' 2>/dev/null <"/proc/$1/cmdline" | grep -qFf <(marks); }

# PID of NAME if that process is alive and is this stack's.
stack_pid() {
  local f=$dir/$1.pid pid
  [[ -f $f ]] || return 1
  pid=$(<"$f")
  [[ $pid =~ ^[0-9]+$ ]] && alive "$pid" && ours "$pid" || return 1
  echo "$pid"
}

# Processes of this stack, PID files or not (nginx's workers rename themselves: they are the
# children of its master, checked by the ports).
leftovers() {
  local p
  for p in /proc/[0-9]*; do
    p=${p#/proc/}
    [[ $p == "$$" || $p == "$BASHPID" ]] && continue
    ours "$p" && alive "$p" && echo "$p"
  done
  return 0
}

# Whether PID runs (a zombie waiting for init to reap it has stopped).
alive() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [[ ${stat%% *} != Z ]]
}

listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

down() {
  local name pid i ports=() port left
  if [[ -f $dir/ports ]]; then read -ra ports <"$dir/ports"; fi
  for ((i = ${#names[@]} - 1; i >= 0; i--)); do
    name=${names[i]}
    if pid=$(stack_pid "$name"); then
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 100); do alive "$pid" || break; sleep 0.1; done
      if alive "$pid"; then
        log "$name (pid $pid) did not stop on TERM in 10 s: killed"
        kill -KILL "$pid" 2>/dev/null || true
        sleep 0.2
      fi
    fi
    rm -f "$dir/$name.pid"
  done
  # Whatever a failed up started without writing its PID file.
  for pid in $(leftovers); do kill -KILL "$pid" 2>/dev/null || true; done
  sleep 0.1
  left=$(leftovers)
  [[ -z $left ]] || die "still running after down: $(echo "$left" | tr '\n' ' ')"
  for port in "${ports[@]}"; do
    for _ in $(seq 50); do listening "$port" || break; sleep 0.1; done
    ! listening "$port" || die "port $port still answers after down"
  done
  rm -rf "$dir/prometheus-data" "$dir/nginx-tmp" "$dir/stack.env" "$dir/ports"
}

# Debian packages, installed only when missing, without starting their system services.
apt_install() {
  local missing=() p policy=/usr/sbin/policy-rc.d added=
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  [[ $(id -u) == 0 ]] || die "needs ${missing[*]}: run as root, or apt-get install them"
  log "installing ${missing[*]}"
  if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod +x "$policy"
    added=1
  fi
  export DEBIAN_FRONTEND=noninteractive
  local rc=0
  { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; } || rc=$?
  [[ -z $added ]] || rm -f "$policy"
  ((rc == 0)) || die "apt-get install ${missing[*]} failed"
}

# The venv with the pinned packages; prints its python.
venv() {
  local cache=${RDK_CACHE:-/var/cache/retry-debt-kit}/staging-venv key v tmp
  command -v python3 >/dev/null || die "python3 is missing"
  if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then apt_install python3-venv; fi
  key=$({ python3 -c 'import sys; print(sys.version)'; cat "$data/requirements.txt"; } | sha256sum | cut -c1-16)
  v=$cache/$key
  if [[ ! -x $v/bin/python ]] || ! "$v/bin/python" -c 'import waitress, prometheus_client' 2>/dev/null; then
    log "creating the venv $v"
    mkdir -p "$cache"
    tmp=$(mktemp -d "$cache/.new.XXXXXX")
    # Built under a temp name, renamed when complete (only bin/python is used: it runs from
    # anywhere). An up racing this one that renamed first keeps its venv.
    python3 -m venv "$tmp" >/dev/null
    "$tmp/bin/python" -m pip install -q --disable-pip-version-check --no-deps --require-hashes \
      -r "$data/requirements.txt" >/dev/null || { rm -rf "$tmp"; die "pip install failed"; }
    rm -rf "$v"
    mv -T "$tmp" "$v" 2>/dev/null || rm -rf "$tmp"
  fi
  echo "$v/bin/python"
}

# N free loopback ports, distinct.
free_ports() {
  python3 - "$1" <<'EOF'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}

# Waits up to $3 s until URL $2 answers 200, while process $1 runs.
wait_url() {
  local name=$1 url=$2 deadline=$((SECONDS + $3))
  until curl -fsS -o /dev/null -m 2 "$url" 2>/dev/null; do
    stack_pid "$name" >/dev/null || failed "$name exited"
    ((SECONDS < deadline)) || failed "$name did not answer $url in $3 s"
    sleep 0.2
  done
}

# Starts NAME: the rest of the arguments, in its own session, output in DIR/NAME.log.
start() {
  local name=$1
  shift
  setsid "$@" </dev/null >"$dir/$name.log" 2>&1 &
  echo $! >"$dir/$name.pid"
}

failed() {
  local name
  # Down first: the logs stay in DIR, and nothing is left running if printing them fails.
  down || true
  echo "staging-stack.sh: $1; the logs' last lines:" >&2
  for name in "${names[@]}"; do
    [[ -f $dir/$name.log ]] && { echo "--- $name.log" >&2; tail -n 5 "$dir/$name.log" >&2; }
  done
  exit 1
}

up() {
  local all=1 name rules=() f
  for f in "$@"; do
    [[ -f $f ]] || die "rule file $f: not found"
    rules+=("$(cd "$(dirname "$f")" && pwd -P)/$(basename "$f")")
  done
  if [[ -f $dir/stack.env ]]; then
    for name in "${names[@]}"; do stack_pid "$name" >/dev/null || all=; done
    if [[ -n $all ]]; then
      log "already up in $dir"
      return 0
    fi
    log "partly up in $dir: restarting"
  fi
  down

  command -v curl >/dev/null || apt_install curl
  apt_install nginx-light prometheus
  local py
  py=$(venv)

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

  wait_url app "http://127.0.0.1:$app_metrics/metrics" 20
  wait_url app "http://127.0.0.1:$app/work" 20
  wait_url nginx "http://127.0.0.1:$ngx/work" 20
  wait_url exporter "http://127.0.0.1:$exporter/metrics" 20
  wait_url prometheus "http://127.0.0.1:$prom/-/ready" 60
  # Both targets scraped and up, so a query finds its series from the first second.
  local q deadline=$((SECONDS + 30))
  until q=$(curl -fsS -m 2 "http://127.0.0.1:$prom/api/v1/query" --data-urlencode 'query=count(up == 1)' 2>/dev/null) &&
    [[ $q == *'"value":['*',"2"]'* ]]; do
    ((SECONDS < deadline)) || failed "Prometheus did not scrape both targets in 30 s: $q"
    sleep 0.3
  done
  for name in "${names[@]}"; do stack_pid "$name" >/dev/null || failed "$name exited"; done

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
