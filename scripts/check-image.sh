#!/usr/bin/env bash
# The kit's image has two definitions: k8s/Dockerfile (kind and registries) and
# scripts/image-build.sh (no Docker: debootstrap + buildah). This compares what they produce
# so they cannot drift: the Debian packages installed, the binaries in /usr/local/bin (and
# haproxy's in /usr/sbin), the user and the entrypoint.
#   scripts/check-image.sh [ARCHIVE]   (default: build or reuse it with image-build.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/local-cluster.sh
. scripts/lib/local-cluster.sh
fail() { echo "check-image: $*" >&2; exit 1; }

archive=${1:-$(scripts/image-build.sh --archive)}
lc_apt_install jq

# What the Dockerfile says: the binaries its build stage copies out, its final USER and
# ENTRYPOINT, and that /out/ lands in /usr/local/bin/.
df=k8s/Dockerfile
want_bins=$(grep -o 'target/release/[a-z_-]*' "$df" | sed 's|target/release/||' | sort -u | tr '\n' ' ')
want_user=$(awk '$1 == "USER" {u = $2} END {print u}' "$df")
want_entry=$(awk '$1 == "ENTRYPOINT" {$1 = ""; e = $0} END {print e}' "$df" | jq -c .)
grep -q '^COPY --from=build /out/ /usr/local/bin/' "$df" || fail "$df no longer copies /out/ to /usr/local/bin/"
# The packages: the Dockerfile's `apt-get install ... PKG... \` and image-build.sh's list.
want_pkgs=$(sed -n 's/.*apt-get install -y --no-install-recommends \([a-z0-9 .+-]*\).*/\1/p' "$df" | tr ' ' '\n' |
  sed '/^$/d' | sort | tr '\n' ' ')
have_pkgs=$(sed -n 's/^packages=(\(.*\))$/\1/p' scripts/image-build.sh | tr ' ' '\n' | sed '/^$/d' | sort | tr '\n' ' ')
[[ -n $want_pkgs && $want_pkgs == "$have_pkgs" ]] ||
  fail "Debian packages differ: Dockerfile [$want_pkgs], scripts/image-build.sh [$have_pkgs]"

# What the archive holds (docker-archive: manifest.json names the config and the layers).
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tar -C "$tmp" -xf "$archive" manifest.json
config=$(jq -r '.[0].Config' "$tmp/manifest.json")
tar -C "$tmp" -xf "$archive" "$config"
have_user=$(jq -r '.config.User' "$tmp/$config")
have_entry=$(jq -c '.config.Entrypoint' "$tmp/$config")
files=$(for layer in $(jq -r '.[0].Layers[]' "$tmp/manifest.json"); do
  tar -xOf "$archive" "$layer" | tar -t 2>/dev/null
done)
have_bins=$(sed -n 's|^\(\./\)\{0,1\}usr/local/bin/\([a-z_-]\{1,\}\)$|\2|p' <<<"$files" | sort -u | tr '\n' ' ')

[[ $have_bins == "$want_bins" ]] || fail "binaries in /usr/local/bin differ: Dockerfile [$want_bins], image [$have_bins]"
[[ $have_user == "$want_user" ]] || fail "user differs: Dockerfile $want_user, image $have_user"
[[ $have_entry == "$want_entry" ]] || fail "entrypoint differs: Dockerfile $want_entry, image $have_entry"
# F5's gateway runs `haproxy` from the image (k8s/overlays/gateway).
if [[ " $want_pkgs " == *" haproxy "* ]]; then
  grep -Eq '^(\./)?usr/sbin/haproxy$' <<<"$files" || fail "the image has no /usr/sbin/haproxy (an old cached root?)"
fi
echo "check-image: Dockerfile and $(basename "$archive") agree: packages ${want_pkgs% }, /usr/local/bin/{${want_bins% }}, user $want_user, entrypoint $want_entry"
