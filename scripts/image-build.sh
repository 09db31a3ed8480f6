#!/usr/bin/env bash
# Makes the kit's image without Docker: what k8s/Dockerfile describes (the four release
# binaries in /usr/local/bin, Debian's haproxy for F5's gateway, user 10001, entrypoint the
# service) on a minimal Debian bookworm root made with debootstrap (cached), committed with
# buildah and written as an archive that containerd imports (`ctr images import`) and
# `kind load image-archive` accepts.
#
#   scripts/image-build.sh          build (or reuse) the archive; print the image reference
#   scripts/image-build.sh --archive   the same, but print the archive's path
#
# The tag is the git commit (as cluster-up.sh does for kind), with a hash of the binaries and
# the root's package list added when the tree has uncommitted changes, so
# `imagePullPolicy: IfNotPresent` always runs exactly this build. Env: RDK_CACHE, CARGO_TARGET_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/local-cluster.sh
. scripts/lib/local-cluster.sh

want=ref
case ${1-} in
  "") ;;
  --archive) want=archive ;;
  *) lc_die "unknown argument '$1' (no argument, or --archive)" ;;
esac
lc_need_root
lc_apt_install buildah debootstrap
images=$RDK_CACHE/images
mkdir -p "$images"

# The root: bookworm minbase, the Debian packages and the kit user, as the Dockerfile's final
# stage has them (check-image.sh compares the two). Made once per package list: the list is
# in the file's name, so a root made before a package was added is never reused.
packages=(ca-certificates haproxy)
root_key=$(echo "bookworm minbase ${packages[*]} uid 10001" | sha256sum | cut -c1-8)
rootfs=$images/bookworm-kit-root-$root_key.tar
if [[ ! -f $rootfs ]]; then
  mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  mirror=${mirror:-http://deb.debian.org/debian}
  dir=$(mktemp -d "$images/root.XXXXXX")
  lc_log "debootstrap bookworm from $mirror (about 2 minutes, once)"
  # debootstrap resolves the packages' dependencies, and while it installs them a policy-rc.d
  # (exit 101) and a no-op start-stop-daemon keep haproxy's postinst from starting anything.
  debootstrap --variant=minbase --include="$(IFS=,; echo "${packages[*]}")" bookworm "$dir" "$mirror" \
    >"$images/debootstrap.log" 2>&1 || { rm -rf "$dir"; lc_die "debootstrap failed; see $images/debootstrap.log"; }
  chroot "$dir" haproxy -v >>"$images/debootstrap.log" 2>&1 ||
    { rm -rf "$dir"; lc_die "haproxy does not run in the new root; see $images/debootstrap.log"; }
  chmod 755 "$dir" # mktemp made it 0700; it becomes the image's /
  chroot "$dir" useradd --system --uid 10001 --no-create-home kit
  rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/*
  tar -C "$dir" --exclude=./dev --exclude=./proc --exclude=./sys -cf "$rootfs.tmp" .
  rm -rf "$dir"
  mv "$rootfs.tmp" "$rootfs"
fi

bins=(service loadgen meter falsification)
cargo build --release --locked --bins -q >&2
release=${CARGO_TARGET_DIR:-target}/release
tag=$(git rev-parse --short HEAD 2>/dev/null || echo dev)
if [[ -n $(git status --porcelain --untracked-files=no 2>/dev/null) ]]; then
  tag+=-$( (cd "$release" && cat "${bins[@]}" && echo "$root_key") | sha256sum | cut -c1-8)
fi
ref=retry-debt-kit:$tag
archive=$images/retry-debt-kit-$tag.tar

if [[ ! -f $archive ]]; then
  t0=$SECONDS
  c=$(lc_buildah from scratch)
  lc_buildah add "$c" "$rootfs" / >/dev/null
  lc_buildah copy "$c" "${bins[@]/#/$release/}" /usr/local/bin/ >/dev/null
  lc_buildah config --user 10001 --entrypoint '["/usr/local/bin/service"]' "$c"
  lc_buildah commit --quiet --rm "$c" "$ref" >/dev/null
  rm -f "$archive.tmp"
  # docker.io/library/NAME is what a bare `image: retry-debt-kit:TAG` resolves to in containerd.
  lc_buildah push --quiet "$ref" "docker-archive:$archive.tmp:docker.io/library/$ref"
  lc_buildah rmi "$ref" >/dev/null
  mv "$archive.tmp" "$archive"
  lc_log "built $ref -> $archive ($((SECONDS - t0)) s of buildah)"
  # Each commit makes a new archive (about 350 MB): keep the newest three.
  find "$images" -maxdepth 1 -name 'retry-debt-kit-*.tar' -printf '%T@ %p\n' | sort -rn | tail -n +4 |
    cut -d' ' -f2- | xargs -r rm -f
fi
if [[ $want == archive ]]; then echo "$archive"; else echo "$ref"; fi
