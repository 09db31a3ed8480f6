# shellcheck shell=bash disable=SC2154 # dir and the stack_* settings are set by the scripts that source this file
# Shared by the stacks of off-the-shelf servers on loopback (scripts/staging-stack.sh,
# scripts/secure-stack.sh; sourced, not run, after they cd to the repository root): messages,
# the stack's processes found by their command lines, down (TERM, then KILL, leftovers, ports
# free), Debian packages, the cached venv, free ports, waits, and the up/down bookkeeping.
#
# What the sourcing script sets before calling these:
#   stack_script   its name, for messages (staging-stack.sh)
#   names          the processes of the stack, in start order; each has DIR/NAME.pid and
#                  DIR/NAME.log
#   stack_files    the files in DIR the processes are started with (what names this stack in
#                  their command lines)
#   stack_clean    what down removes from DIR besides stack.env and ports
#   stack_logs     the logs (DIR/NAME.log) failed shows the last lines of
#   dir            the stack's folder, absolute (stack_dir sets it)
# The script writes the free ports it uses in DIR/ports, and DIR/stack.env once up.

die() { echo "$stack_script: $*" >&2; exit 1; }
log() { echo "$stack_script: $*" >&2; }

# Sets dir to CMD's folder DIR (made when missing), or exits when CMD is down and DIR does not
# exist: nothing to stop.
stack_dir() {
  if [[ $1 == down && ! -d $2 ]]; then
    log "nothing to stop in $2"
    exit 0
  fi
  mkdir -p "$2"
  dir=$(cd "$2" && pwd -P)
}

# What names this stack in its processes' command lines: the files each was started with.
marks() {
  local f
  for f in "${stack_files[@]}"; do echo "$dir/$f"; done
}

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
  local name pid i ports=() port left f
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
  for f in stack.env ports "${stack_clean[@]}"; do rm -rf "${dir:?}/$f"; done
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

# The venv with the packages pinned in REQUIREMENTS, cached under NAME and keyed by that file
# and the Python version, made anew when python cannot import IMPORTS (a Python import list);
# the arguments after IMPORTS go to pip install. Prints its python.
venv() {
  local cache=${RDK_CACHE:-/var/cache/retry-debt-kit}/$1 requirements=$2 imports=$3 key v tmp
  shift 3
  command -v python3 >/dev/null || die "python3 is missing"
  if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then apt_install python3-venv; fi
  key=$({ python3 -c 'import sys; print(sys.version)'; cat "$requirements"; } | sha256sum | cut -c1-16)
  v=$cache/$key
  if [[ ! -x $v/bin/python ]] || ! "$v/bin/python" -c "import $imports" 2>/dev/null; then
    log "creating the venv $v"
    mkdir -p "$cache"
    tmp=$(mktemp -d "$cache/.new.XXXXXX")
    # Built under a temp name, renamed when complete (only bin/python is used: it runs from
    # anywhere). An up racing this one that renamed first keeps its venv.
    python3 -m venv "$tmp" >/dev/null
    "$tmp/bin/python" -m pip install -q --disable-pip-version-check --no-deps --require-hashes \
      "$@" -r "$requirements" >/dev/null || { rm -rf "$tmp"; die "pip install failed"; }
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

# Waits up to $2 s until curl, with the arguments after $2 (the URL last), succeeds, while
# process $1 runs.
wait_curl() {
  local name=$1 secs=$2 deadline=$((SECONDS + $2))
  shift 2
  until curl -fsS -o /dev/null -m 2 "$@" 2>/dev/null; do
    stack_pid "$name" >/dev/null || failed "$name exited"
    ((SECONDS < deadline)) || failed "$name did not answer ${*: -1} in $secs s"
    sleep 0.2
  done
}

# Waits up to $3 s until port $2 accepts, while process $1 runs.
wait_port() {
  local name=$1 port=$2 deadline=$((SECONDS + $3))
  until listening "$port"; do
    stack_pid "$name" >/dev/null || failed "$name exited"
    ((SECONDS < deadline)) || failed "$name did not listen on port $port in $3 s"
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
  echo "$stack_script: $1; the logs' last lines:" >&2
  for name in "${stack_logs[@]}"; do
    [[ -f $dir/$name.log ]] && { echo "--- $name.log" >&2; tail -n 5 "$dir/$name.log" >&2; }
  done
  exit 1
}

# Whether the stack in DIR is up (said): stack.env written and every process running. When it
# is partly up, says so; the caller downs what is left and starts it again.
already_up() {
  local name
  [[ -f $dir/stack.env ]] || return 1
  for name in "${names[@]}"; do
    if ! stack_pid "$name" >/dev/null; then
      log "partly up in $dir: restarting"
      return 1
    fi
  done
  log "already up in $dir"
}

# Fails the up unless every process of the stack still runs.
all_running() {
  local name
  for name in "${names[@]}"; do stack_pid "$name" >/dev/null || failed "$name exited"; done
}
