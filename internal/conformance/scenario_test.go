package conformance_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// scenarioFile is sdk/conformance/scenarios.json.
type scenarioFile struct {
	Version   int        `json:"version"`
	Scenarios []scenario `json:"scenarios"`
}

type scenario struct {
	ID        string `json:"id"`
	Title     string `json:"title"`
	Guarantee string `json:"guarantee"`
	Steps     []step `json:"steps"`
}

// step is one step of the step language (sdk/conformance/README.md): every
// field any op takes; each op reads the ones it names.
type step struct {
	Op           string `json:"op"`
	As           string `json:"as"`
	Client       string `json:"client"`
	Session      string `json:"session"`
	Lock         string `json:"lock"`
	Name         string `json:"name"`
	Gateways     []int  `json:"gateways"`
	Gateway      *int   `json:"gateway"`
	Token        string `json:"token"`
	TTLMs        int64  `json:"ttlMs"`
	WaitTimeout  int64  `json:"waitTimeoutMs"`
	RequestID    string `json:"requestId"`
	ManualRenew  bool   `json:"manualRenew"`
	Position     int64  `json:"position"`
	TimeoutMs    int64  `json:"timeoutMs"`
	ForMs        int64  `json:"forMs"`
	MinElapsedMs int64  `json:"minElapsedMs"`
	MaxElapsedMs int64  `json:"maxElapsedMs"`
	WithinMs     *int64 `json:"withinMs"`
	EarlyMs      int64  `json:"earlyMs"`
	Error        string `json:"error"`
	ExpectError  string `json:"expectError"`
	Expect       string `json:"expect"`
	ThanLock     string `json:"thanLock"`
	Than         string `json:"than"`
	AfterLossOf  string `json:"afterLossOf"`
	Method       string `json:"method"`
	Count        *int64 `json:"count"`
	AtLeast      int    `json:"atLeast"`
	Exit         string `json:"exit"`
	Resource     string `json:"resource"`
	TokenSource  bool   `json:"tokenSource"`
	TLS          string `json:"tls"`
	Record       bool   `json:"recordRenewals"`
	Next         string `json:"next"`
	Odd          bool   `json:"odd"`
}

// scenariosPath is sdk/conformance/scenarios.json, found from this file.
func scenariosPath() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "sdk", "conformance", "scenarios.json")
}

// loadScenarios reads the scenarios, refusing unknown fields so that a
// misspelt field fails here rather than being silently ignored.
func loadScenarios() (scenarioFile, error) {
	var f scenarioFile
	b, err := os.ReadFile(scenariosPath())
	if err != nil {
		return f, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return f, fmt.Errorf("%s: %w", scenariosPath(), err)
	}
	if f.Version != 1 {
		return f, fmt.Errorf("%s: version %d; this runner reads version 1", scenariosPath(), f.Version)
	}
	seen := map[string]bool{}
	for _, sc := range f.Scenarios {
		if sc.ID == "" || seen[sc.ID] {
			return f, fmt.Errorf("%s: scenario id %q is empty or repeated", scenariosPath(), sc.ID)
		}
		seen[sc.ID] = true
	}
	return f, nil
}

// TestReadmeListsScenarios keeps sdk/conformance/README.md's list of
// scenarios ("- `id`: title.") in step with scenarios.json.
func TestReadmeListsScenarios(t *testing.T) {
	f, err := loadScenarios()
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(filepath.Dir(scenariosPath()), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range f.Scenarios {
		if line := fmt.Sprintf("- `%s`: %s.\n", sc.ID, sc.Title); !strings.Contains(string(readme), line) {
			t.Errorf("sdk/conformance/README.md lacks the line %q", line)
		}
	}
}
