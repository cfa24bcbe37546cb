#!/usr/bin/env bash
# Builds the upstream programs listed in `programs` from the modules each folder's go.mod pins, into
# $1 (default .tools/cluster/bin); further arguments name the folders to build (default: all). A folder
# is rebuilt only when its go.mod, go.sum, programs lines or this script change: the hash of those is
# kept beside the binaries.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$(mkdir -p "${1:-$here/../../.tools/cluster/bin}" && cd "${1:-$here/../../.tools/cluster/bin}" && pwd)"
export CGO_ENABLED=0 GOFLAGS=-mod=mod

# Version strings the programs report (the API server's /version, `pulumi version`, the provider's plugin
# version), which the binaries otherwise leave empty.
ldflags() {
	local dir=$1 v
	v=$(cd "$here/$dir" && go list -m -f '{{.Version}}' "$2")
	case $dir in
	kube) echo "-X k8s.io/component-base/version.gitVersion=$v -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$(echo "$v" | cut -d. -f2) -X k8s.io/client-go/pkg/version.gitVersion=$v" ;;
	pulumi) echo "-X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$v" ;;
	pulumi-kubernetes) echo "-X github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version=${v#v}" ;;
	esac
}

folders=("${@:2}")
[[ ${#folders[@]} -gt 0 ]] || folders=($(grep -v '^#' "$here/programs" | awk '{print $1}' | uniq))
pins() {
	cat "$here/$1/go.mod" "$here/$1/go.sum" <(grep "^$1 " "$here/programs") "$here/build.sh" | sha256sum | cut -d' ' -f1
}

for dir in "${folders[@]}"; do
	stamp="$out/.stamp-$dir"
	if [[ -f $stamp && $(cat "$stamp") == "$(pins "$dir")" ]]; then continue; fi
	cd "$here/$dir"
	if [[ $dir == pulumi-kubernetes ]]; then
		# The provider's schema is read from its module's source: download it first (`go list -m` names
		# no directory for a module not yet in the cache), and stop if it still has none.
		go mod download github.com/pulumi/pulumi-kubernetes/provider/v4
		moddir=$(go list -m -f '{{.Dir}}' github.com/pulumi/pulumi-kubernetes/provider/v4)
		[[ -n $moddir ]] || { echo "build.sh: no source for github.com/pulumi/pulumi-kubernetes/provider/v4 after go mod download" >&2; exit 1; }
		src=$moddir/cmd/pulumi-resource-kubernetes
		cp "$src/schema.json" schema-embed.json
		cp "$src/terraform-mapping.json" terraform-mapping-embed.json
		chmod u+w schema-embed.json terraform-mapping-embed.json
	fi
	grep "^$dir " "$here/programs" | while read -r _ binary package module; do
		echo "building $binary ($dir: $module)"
		go build -trimpath -ldflags "-s -w $(ldflags "$dir" "$module")" -o "$out/$binary" "$package"
	done
	pins "$dir" >"$stamp" # after the build: go.sum gains the hashes of what only the main package imports
done
