package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"
)

// configFlag names the flag (and, through applyEnv, LEASEGATE_CONFIG) that
// points at the optional config file.
const configFlag = "config"

// maxConfigFileBytes bounds the config file: it holds a few dozen flag values.
const maxConfigFileBytes = 1 << 20

// applyConfigFile sets every flag that is still unset — neither given on the
// command line nor taken from the environment by applyEnv, which must run
// first — from the file named by --config (or LEASEGATE_CONFIG). The
// precedence is therefore flags > environment > file > built-in default.
//
// The file is YAML or JSON (JSON is YAML): one mapping whose keys are flag
// names without dashes in front, for example
//
//	listen: ":7070"
//	default-ttl: 30s
//	etcd:
//	  - etcd-a=http://etcd-a-0.etcd-a:2379,http://etcd-a-1.etcd-a:2379
//
// A flag that repeats (--etcd) takes a list or a single string. Unknown keys,
// duplicate keys and nested values are errors that name the key, so a typo
// never silently falls back to a default. With no --config it does nothing.
func applyConfigFile(fs *pflag.FlagSet) error { return applyConfigFileKeys(fs, fs) }

// applyConfigFileKeys is applyConfigFile for a command that takes some of
// the keys of a file written for another one, whose flags are known: every
// key must be a flag of known with a value that flag takes, and the keys
// that are flags of fs are set. So the gateway's file serves an operator
// command, which uses its own keys of it, and a typo is still refused.
func applyConfigFileKeys(fs, known *pflag.FlagSet) error {
	cf := fs.Lookup(configFlag)
	if cf == nil || cf.Value.String() == "" {
		return nil
	}
	path := cf.Value.String()
	vals, err := readConfigFile(path)
	if err != nil {
		return err
	}
	keys := slices.Sorted(maps.Keys(vals))
	// Check every key before setting any, so a bad file changes nothing.
	items := make(map[string][]string, len(keys))
	for _, k := range keys {
		f := known.Lookup(k)
		if f == nil || k == configFlag || notConfig[k] {
			return fmt.Errorf("config file %s: unknown key %q; keys are flag names: %s", path, k, strings.Join(configKeys(known), ", "))
		}
		if items[k], err = configValues(f, vals[k]); err != nil {
			return fmt.Errorf("config file %s: key %q: %w", path, k, err)
		}
	}
	for _, k := range keys {
		f := fs.Lookup(k)
		if f == nil {
			continue // another command's key
		}
		if f.Changed {
			continue // given as a flag or by LEASEGATE_*: those win
		}
		for _, v := range items[k] {
			if err := fs.Set(k, v); err != nil {
				return fmt.Errorf("config file %s: key %q: %w", path, k, err)
			}
		}
	}
	return nil
}

// readConfigFile decodes the file into its top-level mapping.
func readConfigFile(path string) (map[string]any, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, maxConfigFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	if len(raw) > maxConfigFileBytes {
		return nil, fmt.Errorf("config file %s: larger than %d bytes", path, maxConfigFileBytes)
	}
	// YAMLToJSONStrict refuses duplicate keys; JSON input is YAML too.
	js, err := yaml.YAMLToJSONStrict(raw)
	if err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	if t := bytes.TrimSpace(js); len(t) == 0 || bytes.Equal(t, []byte("null")) {
		return map[string]any{}, nil // an empty file sets nothing
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber() // keep integers exact: 16777216, not 1.6777216e+07
	var vals map[string]any
	if err := dec.Decode(&vals); err != nil {
		return nil, fmt.Errorf("config file %s: want a mapping of flag names to values: %w", path, err)
	}
	return vals, nil
}

// configValues turns a decoded value into the strings fs.Set takes: one for
// a plain flag, one per item for a repeatable flag.
func configValues(f *pflag.Flag, v any) ([]string, error) {
	repeatable := strings.HasSuffix(f.Value.Type(), "Array") || strings.HasSuffix(f.Value.Type(), "Slice")
	if list, ok := v.([]any); ok {
		if !repeatable {
			return nil, fmt.Errorf("want a single %s, not a list", f.Value.Type())
		}
		out := make([]string, 0, len(list))
		for i, item := range list {
			s, err := configScalar(item)
			if err != nil {
				return nil, fmt.Errorf("item %d: %w", i, err)
			}
			out = append(out, s)
		}
		return out, nil
	}
	s, err := configScalar(v)
	if err != nil {
		return nil, err
	}
	return []string{s}, nil
}

func configScalar(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case json.Number:
		return x.String(), nil
	case bool:
		return strconv.FormatBool(x), nil
	case nil:
		return "", fmt.Errorf("no value; leave the key out to keep the default")
	default:
		return "", fmt.Errorf("want a string, number or boolean, not %T", v)
	}
}

// configKeys lists the keys a config file may use.
func configKeys(fs *pflag.FlagSet) []string {
	var out []string
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Name != configFlag && !notConfig[f.Name] {
			out = append(out, f.Name)
		}
	})
	return out
}
