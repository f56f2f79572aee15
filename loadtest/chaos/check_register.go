//go:build linux

package chaos

import (
	"fmt"
	"path/filepath"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

// regInput and regOutput are the fenced register's operations for
// porcupine.
type regInput struct {
	name  string
	write bool
	token int64
}

type regOutput struct {
	ok      bool
	highest int64
}

// fencedRegister is the model: the state is the highest accepted token
// (0 at first). A write is legal and accepted only with a token at least
// the state, which it becomes; a refusal is legal only for a lower token
// and reports the state; a read returns the state.
var fencedRegister = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		var order []string
		for _, op := range history {
			n := op.Input.(regInput).name
			if _, ok := by[n]; !ok {
				order = append(order, n)
			}
			by[n] = append(by[n], op)
		}
		out := make([][]porcupine.Operation, 0, len(order))
		for _, n := range order {
			out = append(out, by[n])
		}
		return out
	},
	Init: func() any { return int64(0) },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(int64), input.(regInput), output.(regOutput)
		switch {
		case !in.write:
			return out.highest == s, s
		case out.ok:
			return in.token >= s, in.token
		default:
			return in.token < s && out.highest == s, s
		}
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(regInput), output.(regOutput)
		if !in.write {
			return fmt.Sprintf("read %s → %d", in.name, out.highest)
		}
		if out.ok {
			return fmt.Sprintf("write %s token %d → ok", in.name, in.token)
		}
		return fmt.Sprintf("write %s token %d → stale (highest %d)", in.name, in.token, out.highest)
	},
	DescribeState: func(state any) string { return fmt.Sprintf("highest %d", state.(int64)) },
}

// checkRegister checks the register history for linearizability under the
// fenced-register model. When it is not, porcupine's visualization is
// saved to dir/register.html.
func checkRegister(ops []RegisterOp, dir string) []Violation {
	clients := map[string]int{}
	var names []string
	for _, op := range ops {
		if _, ok := clients[op.Client]; !ok {
			clients[op.Client] = len(clients)
			names = append(names, op.Client)
		}
	}
	sort.Strings(names)
	for i, n := range names {
		clients[n] = i
	}
	hist := make([]porcupine.Operation, 0, len(ops))
	for _, op := range ops {
		hist = append(hist, porcupine.Operation{
			ClientId: clients[op.Client],
			Input:    regInput{name: op.Name, write: op.Write, token: op.Token},
			Call:     op.Invoke.UnixNano(),
			Output:   regOutput{ok: op.OK, highest: op.Highest},
			Return:   op.Complete.UnixNano(),
		})
	}
	res, info := porcupine.CheckOperationsVerbose(fencedRegister, hist, 2*time.Minute)
	switch res {
	case porcupine.Ok:
		return nil
	case porcupine.Unknown:
		return []Violation{{Check: checkLinear, Detail: "porcupine timed out; the history is undecided"}}
	}
	path := filepath.Join(dir, "register.html")
	if err := porcupine.VisualizePath(fencedRegister, info, path); err != nil {
		path = "(visualization failed: " + err.Error() + ")"
	}
	return []Violation{{Check: checkLinear, Detail: fmt.Sprintf("the fenced register's history is not linearizable; see %s", path)}}
}
