package main

import (
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/leasegate/leasegate/internal/buildinfo"
)

// envEndpoint lists the gateways when no --endpoint is given.
const envEndpoint = "LEASEGATE_ENDPOINT"

// envAnnotation is the flag annotation that records the environment
// variable a flag falls back to, for tools that read the flag set.
const envAnnotation = "leasectl_env"

// bindEnv records that flag name of fs falls back to environment variable
// env and shows it in --help: "… [$LEASEGATE_ENDPOINT]". Reading the
// variable stays with the code that owns the flag's value.
func bindEnv(fs *pflag.FlagSet, name, env string) {
	f := fs.Lookup(name)
	if f == nil {
		panic("leasectl: bindEnv: no flag --" + name)
	}
	f.Usage += " [$" + env + "]"
	_ = fs.SetAnnotation(name, envAnnotation, []string{env})
}

// setVersion makes --version print the build: version, VCS revision,
// uncommitted changes, commit time and Go version.
func setVersion(cmd *cobra.Command) {
	cmd.Version = buildinfo.Read().String()
	cmd.SetVersionTemplate("{{.Name}} {{.Version}}\n")
}
