package gateway

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The gateway translates; the fleet (package locks) routes and the engine
// (package queue) locks. So the gateway's code names from queue only its
// errors, the plain values a call carries and answers with, and the limits
// and name checks the wire states — never an engine, a waiter or a
// transaction. A name added here needs a reason of that kind.
var queueNames = map[string]bool{
	// Errors.
	"FieldError": true,
	// Values.
	"AcquireRequest": true, "AuditRecord": true, "AuditRetention": true, "End": true,
	"EventExpired": true, "EventForceReleased": true, "EventHeld": true, "EventLeft": true,
	"EventQueued": true, "EventReleased": true, "EventType": true, "ForceReleaseRequest": true,
	"Grant": true, "Handle": true, "Leader": true, "Renewal": true, "Secret": true, "WatchEvent": true,
	// Limits and checks the wire states.
	"CursorInPrefix": true, "DefaultAuditMaxAge": true, "DefaultAuditMaxRecords": true,
	"MaxIDLen": true, "MaxLeaseTTL": true, "MaxLimit": true,
	"MaxValueLen": true, "MinLeaseTTL": true, "SecretLen": true,
	"ValidateClientID": true, "ValidateKeyName": true, "ValidateName": true,
}

func TestGatewayNamesOnlyQueueValuesAndErrors(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var odd []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == "queue" {
				name := sel.Sel.Name
				if !strings.HasPrefix(name, "Err") && !queueNames[name] && !slices.Contains(odd, name) {
					odd = append(odd, name)
					t.Errorf("%s names queue.%s: the gateway names only queue's errors and values; call the fleet (package locks) instead", fset.Position(sel.Pos()), name)
				}
			}
			return true
		})
	}
}
