package deploy_test

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the generated flag table in docs/configuration.md and the dashboard ConfigMap")

// helpFlag is one flag as `leasegate --help` prints it.
type helpFlag struct {
	Name    string
	Type    string // "" for a boolean flag
	Default string // as printed, quotes removed; "" when none is printed
	Usage   string // without the environment variable
	Env     string // the variable the usage names, "[$LEASEGATE_…]"; "" if none
}

// helpLine matches a flag line of cobra's help:
//
//	    --listen string   address to serve … (default "127.0.0.1:7070")
//	-h, --help            help for leasegate
var helpLine = regexp.MustCompile(`^\s+(?:-\w, )?--([a-z0-9][a-z0-9-]*)(?: (\S+))?\s{2,}(.*)$`)

var helpDefault = regexp.MustCompile(`^(.*) \(default (.*)\)$`)

var helpEnv = regexp.MustCompile(`^(.*) \[\$(LEASEGATE_[A-Z0-9_]+)\]$`)

// parseHelp reads the root command's flags from its help output.
func parseHelp(out string) (map[string]helpFlag, error) {
	flags := map[string]helpFlag{}
	in := false
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "Flags:":
			in = true
			continue
		case !in:
			continue
		case strings.TrimSpace(line) == "":
			in = false
			continue
		}
		m := helpLine.FindStringSubmatch(line)
		if m == nil {
			return nil, fmt.Errorf("cannot read flag line %q", line)
		}
		f := helpFlag{Name: m[1], Type: m[2], Usage: m[3]}
		if d := helpDefault.FindStringSubmatch(f.Usage); d != nil {
			f.Usage, f.Default = d[1], strings.Trim(d[2], `"`)
		}
		if e := helpEnv.FindStringSubmatch(f.Usage); e != nil {
			f.Usage, f.Env = e[1], e[2]
		}
		if f.Name == "help" || f.Name == "version" {
			continue
		}
		flags[f.Name] = f
	}
	if len(flags) == 0 {
		return nil, errors.New("no flags found under \"Flags:\"")
	}
	return flags, nil
}

// envName is the environment variable cmd/leasegate's applyEnv maps a flag to.
func envName(flag string) string {
	return "LEASEGATE_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// flagForEnv is the flag an environment variable sets, or "" if none.
func flagForEnv(env string) string {
	for name := range helpFlags {
		if envName(name) == env {
			return name
		}
	}
	return ""
}

// checkFlagArgs fails t for every "--flag" in args that leasegate lacks.
func checkFlagArgs(t *testing.T, what string, args []string) {
	t.Helper()
	for _, a := range args {
		if !strings.HasPrefix(a, "--") {
			t.Errorf("%s: argument %q: want --flag=value, one per item", what, a)
			continue
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if _, ok := helpFlags[name]; !ok {
			t.Errorf("%s: --%s is not a leasegate flag (leasegate --help lists %s)", what, name, strings.Join(sortedKeys(helpFlags), ", "))
		}
	}
}

// otherEnv are the environment variables deploy files may set on a gateway
// that are not leasegate flags: the Go runtime's and the OpenTelemetry SDK's
// standard ones.
var otherEnv = map[string]bool{
	"GOMEMLIMIT":                  true,
	"GOMAXPROCS":                  true,
	"OTEL_SERVICE_NAME":           true,
	"OTEL_EXPORTER_OTLP_ENDPOINT": true,
	"OTEL_EXPORTER_OTLP_PROTOCOL": true,
	"OTEL_TRACES_EXPORTER":        true,
	"OTEL_RESOURCE_ATTRIBUTES":    true,
}

// checkEnv fails t for every variable leasegate would not read.
func checkEnv(t *testing.T, what string, names []string) {
	t.Helper()
	for _, n := range names {
		switch {
		case strings.HasPrefix(n, "LEASEGATE_"):
			if flagForEnv(n) == "" {
				t.Errorf("%s: %s matches no leasegate flag (LEASEGATE_<FLAG> with dashes as underscores)", what, n)
			}
		case !otherEnv[n]:
			t.Errorf("%s: environment variable %s is neither LEASEGATE_<flag> nor a known runtime variable", what, n)
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestLeasegateEnvMentioned checks every LEASEGATE_* name written anywhere in
// the deploy files, the Dockerfile and the operator docs — comments included, so commented
// examples do not rot — against leasegate's flags.
func TestLeasegateEnvMentioned(t *testing.T) {
	envRe := regexp.MustCompile(`\bLEASEGATE_[A-Z0-9_]*[A-Z0-9]\b`)
	// leasectl's own variables, as its --help names them: "[$LEASEGATE_…]".
	notFlags := map[string]bool{}
	help, err := exec.Command(filepath.Join(binDir, "leasectl"), "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("leasectl --help: %v\n%s", err, help)
	}
	for _, m := range regexp.MustCompile(`\[\$(LEASEGATE_[A-Z0-9_]+)\]`).FindAllStringSubmatch(string(help), -1) {
		notFlags[m[1]] = true
	}
	if !notFlags["LEASEGATE_ENDPOINT"] {
		t.Fatalf("leasectl --help names no [$LEASEGATE_ENDPOINT]:\n%s", help)
	}
	var files []string
	err = filepath.WalkDir(filepath.Join(repoRoot, "deploy"), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(p, ".go") {
			return err
		}
		files = append(files, p)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"Dockerfile", "docs/configuration.md", "docs/operations.md"} {
		files = append(files, filepath.Join(repoRoot, f))
	}
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(repoRoot, p)
		seen := map[string]bool{}
		for _, n := range envRe.FindAllString(string(b), -1) {
			if seen[n] || notFlags[n] {
				continue
			}
			seen[n] = true
			if flagForEnv(n) == "" {
				t.Errorf("%s mentions %s, which matches no leasegate flag", rel, n)
			}
		}
	}
}

// The generated table in docs/configuration.md sits between these markers.
const (
	tableBegin = "<!-- BEGIN FLAG TABLE: generated and checked by deploy/flags_test.go; edit the Allowed and Meaning cells only -->"
	tableEnd   = "<!-- END FLAG TABLE -->"
	tableHead  = "| Flag | Environment variable | Type | Default | Allowed | Meaning |\n|---|---|---|---|---|---|"
	todo       = "TODO"
)

// docRow is one row of the flag table.
type docRow struct {
	Flag, Env, Type, Default, Allowed, Meaning string
}

func (r docRow) String() string {
	return fmt.Sprintf("| `--%s` | `%s` | %s | %s | %s | %s |", r.Flag, r.Env, r.Type, r.Default, r.Allowed, r.Meaning)
}

// wantRow is the row the help output dictates; Allowed and Meaning come
// from the existing row when there is one.
func wantRow(f helpFlag, old *docRow) docRow {
	r := docRow{Flag: f.Name, Env: envName(f.Name), Type: f.Type, Default: "—", Allowed: todo, Meaning: f.Usage}
	if r.Type == "" {
		r.Type = "bool"
	}
	if f.Default != "" {
		r.Default = "`" + f.Default + "`"
	}
	if old != nil {
		r.Allowed, r.Meaning = old.Allowed, old.Meaning
	}
	return r
}

func splitRow(line string) ([]string, bool) {
	line = strings.TrimSpace(line)
	if !strings.HasPrefix(line, "|") || !strings.HasSuffix(line, "|") {
		return nil, false
	}
	cells := strings.Split(strings.Trim(line, "|"), " | ")
	for i := range cells {
		cells[i] = strings.TrimSpace(cells[i])
	}
	return cells, true
}

// parseFlagTable reads the rows of the generated table, by flag name, and
// the names in the order they appear.
func parseFlagTable(doc string) (map[string]*docRow, []string, error) {
	begin, end := strings.Index(doc, tableBegin), strings.Index(doc, tableEnd)
	if begin < 0 || end < begin {
		return nil, nil, fmt.Errorf("no generated flag table (markers %q … %q)", tableBegin, tableEnd)
	}
	rows := map[string]*docRow{}
	var order []string
	for _, line := range strings.Split(doc[begin+len(tableBegin):end], "\n") {
		cells, ok := splitRow(line)
		if !ok || strings.HasPrefix(cells[0], "---") || cells[0] == "Flag" {
			continue
		}
		if len(cells) != 6 {
			return nil, nil, fmt.Errorf("row %q has %d cells, want 6 (no \" | \" inside a cell)", line, len(cells))
		}
		name := strings.TrimPrefix(strings.Trim(cells[0], "`"), "--")
		rows[name] = &docRow{Flag: name, Env: strings.Trim(cells[1], "`"), Type: cells[2], Default: cells[3], Allowed: cells[4], Meaning: cells[5]}
		order = append(order, name)
	}
	return rows, order, nil
}

// TestConfigurationDoc holds docs/configuration.md's flag table to
// `leasegate --help`: one row per flag, no other rows, each with the flag's
// environment variable, type and default, and allowed values written by a
// person. With -update it rewrites the table, keeping what people wrote and
// marking new flags TODO (which still fails until someone fills them in).
func TestConfigurationDoc(t *testing.T) {
	path := filepath.Join(repoRoot, "docs", "configuration.md")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	rows, order, err := parseFlagTable(doc)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if *update {
		var lines []string
		for _, name := range sortedKeys(helpFlags) {
			lines = append(lines, wantRow(helpFlags[name], rows[name]).String())
		}
		begin, end := strings.Index(doc, tableBegin), strings.Index(doc, tableEnd)
		doc = doc[:begin] + tableBegin + "\n" + tableHead + "\n" + strings.Join(lines, "\n") + "\n" + doc[end:]
		if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote the flag table in %s", path)
		if rows, order, err = parseFlagTable(doc); err != nil {
			t.Fatal(err)
		}
	}

	for _, name := range sortedKeys(helpFlags) {
		r, ok := rows[name]
		if !ok {
			t.Errorf("docs/configuration.md lacks --%s (%s); run go test ./deploy -run TestConfigurationDoc -update and fill in its Allowed cell", name, helpFlags[name].Usage)
			continue
		}
		w := wantRow(helpFlags[name], r)
		if got := r.String(); got != w.String() {
			t.Errorf("docs/configuration.md row for --%s:\n got %s\nwant %s", name, got, w)
		}
		if r.Allowed == "" || strings.Contains(r.Allowed, todo) {
			t.Errorf("docs/configuration.md: --%s needs its allowed values or range (Allowed is %q)", name, r.Allowed)
		}
		if r.Meaning == "" {
			t.Errorf("docs/configuration.md: --%s needs a meaning", name)
		}
	}
	for _, name := range order {
		if _, ok := helpFlags[name]; !ok {
			t.Errorf("docs/configuration.md documents --%s, which leasegate --help does not list", name)
		}
	}
	if !slices.IsSorted(order) {
		t.Errorf("docs/configuration.md: flag rows are not sorted by name; -update sorts them")
	}
}
