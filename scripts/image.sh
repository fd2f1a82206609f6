#!/usr/bin/env bash
# `make image`: lapse as an OCI image, built without a Docker engine or a
# registry, into dist/image (an OCI layout: podman, skopeo, crane and
# umoci read it) and dist/lapse-image.tar (the same layout as one file:
# `docker load`, `podman load`, `skopeo copy oci-archive:…` take it).
#
# One layer on an empty base, so no shell, no package manager, nothing to
# patch but lapse: the static binary (CGO_ENABLED=0) as /usr/bin/lapse,
# /etc/passwd and /etc/group naming the user it runs as (nonroot, 65532),
# the CA certificates of this machine (for https gateways and sinks), and
# /var/lib/lapse, the working directory, writable by nonroot (a SQLite store
# there; mount a volume to keep it). The layer is written with tar so that
# owners and times are set here and not taken from the disk, and added with
# umoci (Debian's package), which also sets the configuration.
#
# Environment: IMAGE_ARCH (default: this machine's), VERSION (default: git
# describe), DIST (default: dist).
set -euo pipefail
cd "$(dirname "$0")/.."

command -v umoci >/dev/null || {
	if [ "$(id -u)" != 0 ]; then echo "image.sh: umoci is missing (apt-get install umoci)" >&2; exit 1; fi
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends umoci >/dev/null
}
certs=/etc/ssl/certs/ca-certificates.crt
[ -s "$certs" ] || { echo "image.sh: $certs is missing (apt-get install ca-certificates)" >&2; exit 1; }

arch=${IMAGE_ARCH:-$(go env GOARCH)}
version=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
commit=$(git rev-parse HEAD 2>/dev/null || true)
date=$(git log -1 --format=%cI 2>/dev/null || true)
epoch=$(git log -1 --format=%ct 2>/dev/null || echo 0) # every file's time: the commit's
dist=${DIST:-dist}
tag=${version//[^A-Za-z0-9_.-]/-} # a tag takes no '+' or '/'
uid=65532

stage=$(mktemp -d /tmp/lapse-image.XXXXXX)
trap 'rm -rf "$stage"' EXIT
root=$stage/root
mkdir -p "$root/usr/bin" "$root/etc/ssl/certs" "$root/var/lib/lapse" "$root/tmp"
CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath \
	-ldflags "-s -w -X main.version=$version -X main.commit=$commit -X main.date=$date" \
	-o "$root/usr/bin/lapse" ./cmd/lapse
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/var/lib/lapse:/sbin/nologin\n' $uid $uid >"$root/etc/passwd"
printf 'root:x:0:\nnonroot:x:%d:\n' $uid >"$root/etc/group"
cp "$certs" "$root/etc/ssl/certs/ca-certificates.crt"
chmod 0755 "$root/usr/bin/lapse" && chmod 0644 "$root/etc/passwd" "$root/etc/group" "$root/etc/ssl/certs/ca-certificates.crt"
chmod 0750 "$root/var/lib/lapse" && chmod 1777 "$root/tmp"

tarflags=(--sort=name --mtime="@$epoch" --numeric-owner --format=posix --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime)
tar -C "$root" "${tarflags[@]}" --owner=0 --group=0 --exclude=var/lib/lapse -cf "$stage/layer.tar" etc tmp usr var
tar -C "$root" "${tarflags[@]}" --owner=$uid --group=$uid -rf "$stage/layer.tar" var/lib/lapse

out=$dist/image
rm -rf "$out" "$dist/lapse-image.tar"
mkdir -p "$dist"
created=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)
umoci init --layout "$out"
umoci new --image "$out:$tag"
umoci raw add-layer --image "$out:$tag" --history.created "$created" --history.created_by "scripts/image.sh" "$stage/layer.tar"
umoci config --image "$out:$tag" --created "$created" --history.created "$created" --history.created_by "scripts/image.sh" \
	--os linux --architecture "$arch" \
	--config.user "$uid:$uid" \
	--config.entrypoint /usr/bin/lapse --config.cmd serve \
	--config.env LAPSE_ADDR=:8080 \
	--config.workingdir /var/lib/lapse \
	--config.exposedports 8080/tcp \
	--config.stopsignal SIGTERM \
	--config.label org.opencontainers.image.title=lapse \
	--config.label "org.opencontainers.image.description=Cancels unpaid orders at their deadline" \
	--config.label org.opencontainers.image.source=https://github.com/lapsehq/lapse \
	--config.label org.opencontainers.image.licenses=Apache-2.0 \
	--config.label "org.opencontainers.image.version=$version" \
	--config.label "org.opencontainers.image.revision=$commit" \
	--config.label "org.opencontainers.image.created=$created"
umoci gc --layout "$out"
tar -C "$out" --sort=name --mtime="@$epoch" --owner=0 --group=0 --numeric-owner -cf "$dist/lapse-image.tar" .
echo "image.sh: $out:$tag and $dist/lapse-image.tar (linux/$arch, $(du -sh "$dist/lapse-image.tar" | cut -f1))"
