// pulumi-resource-kubernetes, built from pulumi-kubernetes's provider module. Upstream's main embeds
// schema-embed.json and terraform-mapping-embed.json, which its Makefile generates and the module does not
// ship; the build (tools/cluster/build.sh) copies the module's schema.json and terraform-mapping.json to
// those names here (ignored by git), and this is the same one-line main around them.
package main

import (
	_ "embed"

	"github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/provider"
	"github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version"
)

//go:embed schema-embed.json
var pulumiSchema []byte

//go:embed terraform-mapping-embed.json
var terraformMapping []byte

func main() {
	provider.Serve("kubernetes", version.Version, pulumiSchema, terraformMapping)
}
