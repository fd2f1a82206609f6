#!/usr/bin/env bash
# Builds the release as a snapshot (`make release-snapshot`: goreleaser
# release --snapshot --clean, nothing published) and checks what it wrote in
# dist/release: an archive and a CycloneDX SBOM for each of linux and darwin
# on amd64 and arm64, the .deb with the binary, the systemd unit and the
# scripts that make the lapse user, checksums of them all, and a binary that
# names its version and commit. Called by .ci/run and `make check-release`.
set -euo pipefail
cd "$(dirname "$0")/.."
log() { echo "check-release: $*"; }
fail() { echo "check-release: FAIL: $*" >&2; exit 1; }

command -v dpkg-deb >/dev/null || fail "dpkg-deb is missing (a Debian machine has it)"
bash scripts/tools.sh goreleaser cyclonedx-gomod

start=$(date +%s)
out=$(mktemp)
make --no-print-directory release-snapshot >"$out" 2>&1 || { cat "$out"; fail "make release-snapshot failed"; }
rm -f "$out"
log "make release-snapshot: $(($(date +%s) - start)) s"

d=dist/release
version=$(jq -r .version "$d/metadata.json")
commit=$(git rev-parse HEAD)
for platform in linux_amd64 linux_arm64 darwin_amd64 darwin_arm64; do
	archive=$d/lapse_${version}_$platform.tar.gz
	[ -s "$archive" ] || fail "$archive is missing"
	files=$(tar -tzf "$archive") # not piped into grep -q: its early exit would fail tar (pipefail)
	grep -qx lapse <<<"$files" || fail "$archive holds no lapse binary"
	grep -qx deploy/systemd/lapse.service <<<"$files" || fail "$archive holds no systemd unit"
	sbom=$archive.cdx.json
	[ "$(jq -r .bomFormat "$sbom")" = CycloneDX ] || fail "$sbom is not a CycloneDX document"
	jq -e '[.components[].purl] | any(startswith("pkg:golang/github.com/jackc/pgx/v5@"))' "$sbom" >/dev/null ||
		fail "$sbom does not list pgx, a module lapse links"
	grep -q " $(basename "$archive")\$" "$d/checksums.txt" || fail "checksums.txt does not list $archive"
done
goos=$(go env GOOS) goarch=$(go env GOARCH)
tar -xzOf "$d/lapse_${version}_${goos}_${goarch}.tar.gz" lapse >"$d/lapse-check" && chmod +x "$d/lapse-check"
got=$("$d/lapse-check" version)
rm -f "$d/lapse-check"
[[ $got == "lapse $version (commit $commit"* ]] || fail "lapse version printed \"$got\", want version $version and commit $commit"
log "$got"

deb=$(ls "$d"/lapse_*_amd64.deb)
contents=$(dpkg-deb -c "$deb")
for path in ./usr/bin/lapse ./usr/lib/systemd/system/lapse.service ./etc/lapse/lapse.env; do
	grep -q " $path\$" <<<"$contents" || { echo "$contents"; fail "$deb does not hold $path"; }
done
ctl=$(mktemp -d)
dpkg-deb -e "$deb" "$ctl"
grep -q 'useradd --system' "$ctl/preinst" || fail "$deb's preinst does not make the lapse user"
grep -qx 'Package: lapse' "$ctl/control" || fail "$deb is not package lapse"
grep -qx '/etc/lapse/lapse.env' "$ctl/conffiles" || fail "/etc/lapse/lapse.env is not a conffile"
rm -rf "$ctl"
cmp <(dpkg-deb --fsys-tarfile "$deb" | tar -xO ./usr/lib/systemd/system/lapse.service) deploy/systemd/lapse.service ||
	fail "the unit in $deb differs from deploy/systemd/lapse.service"
grep -q " $(basename "$deb")\$" "$d/checksums.txt" || fail "checksums.txt does not list $deb"
(cd "$d" && sha256sum --quiet -c checksums.txt) || fail "checksums.txt does not match the files"
log "ok: 4 archives with their SBOMs, $(basename "$deb"), checksums.txt"
