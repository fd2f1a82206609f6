#!/usr/bin/env bash
# Installs the release and deploy tools at the versions lapse pins, into
# $(go env GOPATH)/bin, unless that folder already has that version: a warm
# machine (a developer's, CI's) builds nothing. Usage: scripts/tools.sh NAME…
# with NAME among the ones below. Put $(go env GOPATH)/bin on PATH to use them.
#
# Pinned here, not in go.mod: they are not lapse's dependencies, and their
# own (hundreds of modules for goreleaser) must not constrain lapse's.
# goreleaser v2.15.1 is the newest that builds with lapse's Go (1.26).
set -euo pipefail

declare -A pkg=(
	[goreleaser]=github.com/goreleaser/goreleaser/v2
	[cyclonedx-gomod]=github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod
	[helm]=helm.sh/helm/v3/cmd/helm
)
declare -A ver=(
	[goreleaser]=v2.15.1
	[cyclonedx-gomod]=v1.10.0
	[helm]=v3.22.0
)

bin=$(go env GOPATH)/bin
for name in "$@"; do
	[ -n "${pkg[$name]:-}" ] || { echo "tools.sh: unknown tool $name (want one of ${!pkg[*]})" >&2; exit 2; }
	have=$(go version -m "$bin/$name" 2>/dev/null | awk '$1 == "mod" { print $3; exit }') || true
	if [ "$have" != "${ver[$name]}" ]; then
		echo "tools.sh: go install ${pkg[$name]}@${ver[$name]}${have:+ (had $have)}"
		go install "${pkg[$name]}@${ver[$name]}"
	fi
done
