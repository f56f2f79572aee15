package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"
)

// notConfig are the flags cobra adds that ask for output rather than
// configure the gateway: neither the environment nor the config file sets
// them (a LEASEGATE_VERSION meant for a build script must not turn the
// gateway into a version printer).
var notConfig = map[string]bool{"help": true, "version": true}

// envName is the environment variable that sets flag name: LEASEGATE_ and
// the name in upper case with dashes as underscores (--default-ttl →
// LEASEGATE_DEFAULT_TTL).
func envName(name string) string {
	return "LEASEGATE_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// showEnv appends each flag's environment variable to its usage text, so
// --help lists it: "… [$LEASEGATE_LISTEN]". Call it after the last flag is
// defined; cobra's own help and version flags, added later, get none.
func showEnv(fs *pflag.FlagSet) {
	fs.VisitAll(func(f *pflag.Flag) {
		if !notConfig[f.Name] {
			f.Usage += " [$" + envName(f.Name) + "]"
		}
	})
}

// applyEnv sets every flag not given on the command line from its envName:
// flags take precedence over the environment. A repeatable flag
// (stringArray) takes its values separated by white space.
func applyEnv(fs *pflag.FlagSet) error {
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Changed || notConfig[f.Name] {
			return
		}
		name := envName(f.Name)
		v, ok := os.LookupEnv(name)
		if !ok {
			return
		}
		if f.Value.Type() == "stringArray" {
			for _, item := range strings.Fields(v) {
				if err = fs.Set(f.Name, item); err != nil {
					err = fmt.Errorf("%s: %w", name, err)
					return
				}
			}
			return
		}
		if serr := fs.Set(f.Name, v); serr != nil {
			err = fmt.Errorf("%s=%q: %w", name, v, serr)
		}
	})
	return err
}
