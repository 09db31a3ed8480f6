#!/usr/bin/env bash
# An off-the-shelf secure staging stack on loopback, for testing a load generator's HTTPS and
# mutual TLS, its request headers, its JSON POSTs and its gRPC calls against servers the kit did
# not write: nginx terminating TLS 1.2/1.3 (ALPN h2 and http/1.1) with client certificates and a
# bearer token, in front of a WSGI orders app under waitress with ONE worker thread (a FIFO that
# finishes abandoned work, like scripts/staging-stack.sh's app), and a gRPC server on grpcio
# serving one call at a time, on h2c and on TLS. falsification/tests/data/secure/README.md says
# what each piece answers.
#
#   scripts/secure-stack.sh up DIR     start it (idempotent), write DIR/stack.env
#   scripts/secure-stack.sh down DIR   stop it, check nothing is left
#
# up installs what is missing (nginx-light with apt, without starting its system service, checked
# for nginx's ssl and http_v2 modules; waitress and grpcio, pinned with hashes in
# falsification/tests/data/secure/requirements.txt, into a venv cached under
# /var/cache/retry-debt-kit/secure-venv keyed by that file and the Python version), makes a test
# PKI with openssl in DIR/pki when it is missing or expiring (a CA, a server certificate for
# localhost and 127.0.0.1, a client certificate, and an unrelated CA for negative tests; EC P-256,
# 2 days), writes nginx's configuration into DIR, starts the three processes on free loopback
# ports, waits until each answers, checks each piece with curl and a grpcio client, and writes
# DIR/stack.env:
#   HTTPS_URL (nginx, mTLS + token: https://127.0.0.1:PORT/orders), HTTPS_WORK_URL (the same
#   server's /work), HTTPS_TLS_ONLY_URL (nginx, TLS without client certificate or token:
#   https://localhost:PORT/work), APP_URL (the orders app direct: http://127.0.0.1:PORT/orders),
#   APP_STATS_URL, GRPC_H2C_URL and GRPC_TLS_URL (.../retrydebt.Work/Do), GRPC_REQUEST_FILE (the
#   bytes every Do call must carry), CA, OTHER_CA, CLIENT_CERT, CLIENT_KEY, TOKEN_HEADER_NAME
#   (authorization; its value is "Bearer $STACK_TOKEN"), STACK_TOKEN, the settings (APP_CPU_MS,
#   GRPC_CPU_MS) and the processes' PIDs (APP_PID, NGINX_PID, GRPC_PID).
#
# Settings, from the environment: STACK_APP_CPU_MS (10: the orders app's CPU per accepted
# request), STACK_GRPC_CPU_MS (10: the gRPC server's CPU per call), STACK_TOKEN
# (s3cret-token-for-tests: the bearer token nginx requires on the mTLS server).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
data=$repo/falsification/tests/data/secure

# The stack, for scripts/lib/loopback-stack.sh: its processes in start order (each has DIR/NAME.pid
# and DIR/NAME.log), the files in DIR they are started with (what names them in their command
# lines), what down removes besides stack.env and ports, and the logs a failed up shows.
stack_script=secure-stack.sh
names=(app nginx grpc)
stack_files=(orders.py nginx.conf grpc_work.py)
stack_clean=(nginx-tmp stack.env.new check)
stack_logs=("${names[@]}" nginx-error)
# shellcheck source=scripts/lib/loopback-stack.sh
. scripts/lib/loopback-stack.sh

usage() { die "usage: $0 up DIR | down DIR"; }
(($# == 2)) || usage
cmd=$1
[[ $cmd == up || $cmd == down ]] || usage
stack_dir "$cmd" "$2"
pki=$dir/pki

# Whether the nginx on PATH has TLS and HTTP/2.
nginx_ok() {
  local v
  command -v nginx >/dev/null || return 1
  v=$(nginx -V 2>&1) || return 1
  [[ $v == *--with-http_ssl_module* && $v == *--with-http_v2_module* ]]
}

# nginx with the ssl and http_v2 modules: Debian's nginx-light, else its fuller builds.
install_nginx() {
  nginx_ok && return 0
  apt_install nginx-light
  nginx_ok && return 0
  log "nginx-light has no ssl or http_v2 module: trying nginx, then nginx-core"
  apt_install nginx
  nginx_ok && return 0
  apt_install nginx-core
  nginx_ok || die "no nginx with --with-http_ssl_module and --with-http_v2_module"
}

# Whether DIR/pki has every file, each certificate valid for 12 hours more.
pki_ok() {
  local f
  for f in ca.pem ca.key server.pem server.key client.pem client.key other-ca.pem; do
    [[ -s $pki/$f ]] || return 1
  done
  for f in ca server client other-ca; do
    openssl x509 -checkend 43200 -noout -in "$pki/$f.pem" >/dev/null 2>&1 || return 1
  done
  openssl verify -CAfile "$pki/ca.pem" "$pki/server.pem" "$pki/client.pem" >/dev/null 2>&1
}

# The test PKI in DIR/pki, made anew when a file is missing or a certificate expires within
# 12 hours; made in a temp folder, renamed when complete.
make_pki() {
  pki_ok && return 0
  command -v openssl >/dev/null || apt_install openssl
  log "making the test PKI in $pki"
  local t
  t=$(mktemp -d "$dir/.pki.XXXXXX")
  cat >"$t/openssl.cnf" <<'EOF'
# Written by scripts/secure-stack.sh: the test PKI's extensions.
[req]
distinguished_name = dn
[dn]
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = DNS:localhost,IP:127.0.0.1
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
[client]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
EOF
  local ec=(-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes) name
  {
    # Two self-signed CAs: the stack's, and one that signed nothing of it (negative tests).
    for name in ca other-ca; do
      openssl req -x509 -config "$t/openssl.cnf" -extensions ca "${ec[@]}" -days 2 \
        -subj "/O=retry-debt-kit tests/CN=retry-debt $name" -keyout "$t/$name.key" -out "$t/$name.pem"
    done
    # The server's and the client's, signed by the stack's CA.
    for name in server client; do
      local cn=localhost
      [[ $name == client ]] && cn=retry-debt-client
      openssl req -new -config "$t/openssl.cnf" "${ec[@]}" -subj "/O=retry-debt-kit tests/CN=$cn" \
        -keyout "$t/$name.key" -out "$t/$name.csr"
      openssl x509 -req -in "$t/$name.csr" -CA "$t/ca.pem" -CAkey "$t/ca.key" \
        -set_serial "0x$(openssl rand -hex 16)" -days 2 -extfile "$t/openssl.cnf" -extensions "$name" \
        -out "$t/$name.pem"
    done
  } >"$t/openssl.log" 2>&1 || { cat "$t/openssl.log" >&2; rm -rf "$t"; die "openssl failed"; }
  # Nothing of the unrelated CA but its certificate.
  rm -f "$t"/*.csr "$t/other-ca.key" "$t/openssl.log" "$t/openssl.cnf"
  chmod 755 "$t"
  chmod 644 "$t"/*.pem
  chmod 600 "$t"/*.key
  rm -rf "$pki"
  mv -T "$t" "$pki"
  pki_ok || die "the PKI made in $pki does not check"
}

# curl's status code (or 000) for the arguments, its output in DIR/check; never fails.
code() { curl -sS -o "$dir/check" -w '%{http_code}' -m 10 "$@" 2>>"$dir/check.err" || true; }

# Each piece answers as stack.env says, through the clients a test uses.
check() {
  local py=$1 mtls=$2 tls=$3 app=$4 h2c=$5 gtls=$6 token=$7 c
  local auth=(-H "Authorization: Bearer $token") json=(-H 'Content-Type: application/json')
  local cert=(--cacert "$pki/ca.pem" --cert "$pki/client.pem" --key "$pki/client.key")
  local order='{"sku":"sku-42","quantity":1}' orders=https://127.0.0.1:$mtls/orders
  : >"$dir/check.err"
  c=$(code "${cert[@]}" "${auth[@]}" "${json[@]}" --data "$order" "$orders")
  [[ $c == 201 ]] || failed "POST $orders with the client certificate and token: $c, not 201: $(cat "$dir/check")"
  c=$(code --http1.1 --tlsv1.2 --tls-max 1.2 "${cert[@]}" "${auth[@]}" "${json[@]}" --data "$order" "$orders")
  [[ $c == 201 ]] || failed "the same over HTTP/1.1 and TLS 1.2: $c, not 201"
  c=$(curl -sS -o /dev/null -w '%{http_version} %{http_code}' -m 10 --http2 "${cert[@]}" "${auth[@]}" \
    "https://127.0.0.1:$mtls/work" 2>>"$dir/check.err" || true)
  [[ $c == "2 200" ]] || failed "curl --http2 on the mTLS server: '$c', not HTTP/2 200"
  # No client certificate: nginx completes the handshake and answers 400 (a TLS 1.3 client may
  # instead see the connection fail); either way, no 2xx.
  c=$(code --cacert "$pki/ca.pem" "${auth[@]}" "${json[@]}" --data "$order" "$orders")
  [[ $c != 2* ]] || failed "POST $orders without a client certificate: $c"
  c=$(code "${cert[@]}" -H "Authorization: Bearer wrong-$token" "${json[@]}" --data "$order" "$orders")
  [[ $c == 401 ]] || failed "POST $orders with a wrong token: $c, not 401"
  c=$(code "${cert[@]}" "${json[@]}" --data "$order" "$orders")
  [[ $c == 401 ]] || failed "POST $orders without a token: $c, not 401"
  # The server's certificate does not verify against the unrelated CA.
  if curl -sS -o /dev/null -m 10 --cacert "$pki/other-ca.pem" "https://localhost:$tls/work" 2>/dev/null; then
    failed "https://localhost:$tls verified against other-ca.pem"
  fi
  c=$(code --cacert "$pki/ca.pem" "https://localhost:$tls/work")
  [[ $c == 200 ]] || failed "GET https://localhost:$tls/work (TLS only): $c, not 200"
  c=$(code "${json[@]}" --data "$order" "http://127.0.0.1:$app/orders")
  [[ $c == 201 ]] || failed "POST to the app direct: $c, not 201"
  c=$(code "http://127.0.0.1:$app/stats")
  [[ $c == 200 && $(<"$dir/check") == *'"bad_request": 0'* ]] ||
    failed "the app's /stats: $c $(cat "$dir/check")"
  # gRPC, both listeners, through grpcio's own client: Do with the request file's bytes.
  "$py" - "127.0.0.1:$h2c" "localhost:$gtls" "$pki/ca.pem" "$data/work-request.bin" \
    >>"$dir/check.err" 2>&1 <<'EOF' || failed "the gRPC server: $(tail -n 3 "$dir/check.err")"
import sys
import grpc

h2c, tls, ca, request_file = sys.argv[1:]
request = open(request_file, "rb").read()
with open(ca, "rb") as f:
    creds = grpc.ssl_channel_credentials(root_certificates=f.read())
for channel in (grpc.insecure_channel(h2c), grpc.secure_channel(tls, creds)):
    with channel:
        answer = channel.unary_unary("/retrydebt.Work/Do")(request, timeout=10, wait_for_ready=True)
        assert answer == b"ok", f"Do answered {answer!r}"
EOF
  rm -f "$dir/check" "$dir/check.err"
}

up() {
  if already_up; then return 0; fi
  down

  local app_cpu=${STACK_APP_CPU_MS:-10} grpc_cpu=${STACK_GRPC_CPU_MS:-10}
  local token=${STACK_TOKEN:-s3cret-token-for-tests}
  [[ $app_cpu =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "STACK_APP_CPU_MS: $app_cpu is not a number of ms"
  [[ $grpc_cpu =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "STACK_GRPC_CPU_MS: $grpc_cpu is not a number of ms"
  # A bearer token's characters (RFC 6750's b64token): safe in nginx's configuration and stack.env.
  [[ $token =~ ^[A-Za-z0-9._~+/=-]+$ ]] || die "STACK_TOKEN: only letters, digits and ._~+/=- please"

  command -v curl >/dev/null || apt_install curl
  install_nginx
  local py
  py=$(venv secure-venv "$data/requirements.txt" 'waitress, grpc' --only-binary :all:)
  make_pki

  local ports app mtls tls h2c gtls
  ports=$(free_ports 5)
  echo "$ports" >"$dir/ports"
  read -r app mtls tls h2c gtls <<<"$ports"

  # The app and the gRPC server run from DIR, so their command lines name it.
  cp "$data/orders.py" "$data/grpc_work.py" "$dir/"
  mkdir -p "$dir/nginx-tmp"

  # nginx 1.25.1 made HTTP/2 a server directive ("http2 on;"); before it, a listen parameter.
  local version h2_listen="" h2_directive=""
  version=$(nginx -v 2>&1 | sed -n 's|.*nginx/\([0-9.]*\).*|\1|p')
  if [[ $(printf '%s\n' 1.25.1 "$version" | sort -V | head -n1) == 1.25.1 ]]; then
    h2_directive="http2 on;"
  else
    h2_listen=" http2"
  fi
  cat >"$dir/nginx.conf" <<EOF
# Written by scripts/secure-stack.sh (nginx $version): one worker, TLS 1.2 and 1.3 with ALPN h2 and
# http/1.1, in front of the orders app. Server $mtls: client certificates signed by the test CA
# and the bearer token required; server $tls: TLS alone. One try per request (no
# proxy_next_upstream), on kept-alive HTTP/1.1 connections to the app.
worker_processes 1;
daemon off;
pid $dir/nginx-tmp/nginx.pid;
error_log $dir/nginx-error.log warn;
worker_rlimit_nofile 10000;
events { worker_connections 4096; }
http {
    log_format secure '\$remote_addr [\$time_local] \$server_port "\$request" \$status '
                      '\$body_bytes_sent \$request_time "\$upstream_status" \$ssl_protocol '
                      'reused=\$ssl_session_reused conn=\$connection/\$connection_requests '
                      '"\$ssl_client_s_dn"';
    access_log $dir/nginx-access.log secure;
    client_body_temp_path $dir/nginx-tmp/body;
    proxy_temp_path $dir/nginx-tmp/proxy;
    fastcgi_temp_path $dir/nginx-tmp/fastcgi;
    uwsgi_temp_path $dir/nginx-tmp/uwsgi;
    scgi_temp_path $dir/nginx-tmp/scgi;
    default_type text/plain;
    keepalive_requests 100000;

    ssl_certificate $pki/server.pem;
    ssl_certificate_key $pki/server.key;
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_session_cache shared:SSL:1m;
    ssl_session_tickets on;

    upstream orders {
        server 127.0.0.1:$app max_fails=0;
        keepalive 32;
    }
    # Applies to both servers: one try, HTTP/1.1 kept alive, long enough for a queue to drain
    # (the client's timeout is the test's, not nginx's).
    proxy_http_version 1.1;
    proxy_set_header Connection "";
    proxy_set_header Host \$host;
    proxy_next_upstream off;
    proxy_next_upstream_tries 1;
    proxy_connect_timeout 5s;
    proxy_send_timeout 300s;
    proxy_read_timeout 300s;

    server {
        listen 127.0.0.1:$mtls ssl$h2_listen;
        $h2_directive
        ssl_verify_client on;
        ssl_client_certificate $pki/ca.pem;
        location / {
            if (\$http_authorization != "Bearer $token") {
                add_header WWW-Authenticate 'Bearer realm="retry-debt"' always;
                return 401 "missing or wrong bearer token\n";
            }
            proxy_pass http://orders;
        }
    }
    server {
        listen 127.0.0.1:$tls ssl$h2_listen;
        $h2_directive
        ssl_verify_client off;
        location / {
            proxy_pass http://orders;
        }
    }
}
EOF

  start app "$py" "$dir/orders.py" --listen "127.0.0.1:$app" --cpu-ms "$app_cpu" --threads 1
  start nginx nginx -p "$dir/" -c "$dir/nginx.conf" -e "$dir/nginx-error.log"
  start grpc "$py" "$dir/grpc_work.py" --h2c "127.0.0.1:$h2c" --tls "127.0.0.1:$gtls" \
    --cert "$pki/server.pem" --key "$pki/server.key" --expect-file "$data/work-request.bin" \
    --cpu-ms "$grpc_cpu"

  wait_curl app 20 "http://127.0.0.1:$app/stats"
  wait_curl nginx 20 --cacert "$pki/ca.pem" "https://localhost:$tls/work"
  wait_port grpc "$h2c" 20
  wait_port grpc "$gtls" 20
  check "$py" "$mtls" "$tls" "$app" "$h2c" "$gtls" "$token"
  all_running

  cat >"$dir/stack.env.new" <<EOF
# Written by scripts/secure-stack.sh up. The token goes in header TOKEN_HEADER_NAME as "Bearer <STACK_TOKEN>".
HTTPS_URL=https://127.0.0.1:$mtls/orders
HTTPS_WORK_URL=https://127.0.0.1:$mtls/work
HTTPS_TLS_ONLY_URL=https://localhost:$tls/work
APP_URL=http://127.0.0.1:$app/orders
APP_STATS_URL=http://127.0.0.1:$app/stats
GRPC_H2C_URL=http://127.0.0.1:$h2c/retrydebt.Work/Do
GRPC_TLS_URL=https://localhost:$gtls/retrydebt.Work/Do
GRPC_REQUEST_FILE=$data/work-request.bin
CA=$pki/ca.pem
OTHER_CA=$pki/other-ca.pem
CLIENT_CERT=$pki/client.pem
CLIENT_KEY=$pki/client.key
TOKEN_HEADER_NAME=authorization
STACK_TOKEN=$token
APP_CPU_MS=$app_cpu
GRPC_CPU_MS=$grpc_cpu
APP_PID=$(<"$dir/app.pid")
NGINX_PID=$(<"$dir/nginx.pid")
GRPC_PID=$(<"$dir/grpc.pid")
EOF
  mv "$dir/stack.env.new" "$dir/stack.env"
  log "up in $dir: mTLS https://127.0.0.1:$mtls/orders, TLS only https://localhost:$tls/work, gRPC h2c $h2c and TLS $gtls"
}

case $cmd in
  up) up ;;
  down)
    down
    log "down in $dir"
    ;;
esac
