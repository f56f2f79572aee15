package gateway

import (
	"fmt"
	"os"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/leasegate/leasegate/locks"
	"github.com/leasegate/leasegate/queue"
)

func TestLoopbackPeer(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:5000": true, "[::1]:5000": true, "127.9.9.9:1": true, "[::ffff:127.0.0.1]:80": true,
		"10.0.0.1:5000": false, "[2001:db8::1]:443": false, "": false, "localhost:80": false,
	} {
		if got := loopbackPeer(addr); got != want {
			t.Errorf("loopbackPeer(%q) = %v; want %v", addr, got, want)
		}
	}
}

func TestRolesClaim(t *testing.T) {
	for _, tc := range []struct {
		in   any
		want []string
	}{
		{"admin reader", []string{"admin", "reader"}},
		{[]any{"admin", 3, ""}, []string{"admin"}},
		{nil, nil}, {42, nil},
	} {
		if got := rolesClaim(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("rolesClaim(%v) = %v; want %v", tc.in, got, tc.want)
		}
	}
}

func TestTokensFileRoles(t *testing.T) {
	path := t.TempDir() + "/tokens"
	if err := os.WriteFile(path, []byte("tok-0123456789abcdef t1 ops admin,reader\ntok-abcdef0123456789 t1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	toks, err := loadTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	var admins, plain int
	for _, id := range toks {
		if id.HasRole(RoleAdmin) && id.HasRole("reader") && id.Subject == "ops" {
			admins++
		} else if len(id.Roles) == 0 && id.Subject == "t1" {
			plain++
		}
	}
	if admins != 1 || plain != 1 {
		t.Fatalf("tokens %v", toks)
	}
	if err := os.WriteFile(path, []byte("tok-0123456789abcdef t1 ops admin,,x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadTokens(path); err == nil {
		t.Fatal("an empty role was accepted")
	}
}

// A batch is cut into messages at revision boundaries; a revision too big
// for one message spans several, and only its last moves the token.
func TestWatchMessagesCutAtRevisions(t *testing.T) {
	var evs []queue.WatchEvent
	for i := range 250 {
		rev := int64(10)
		if i >= 50 {
			rev = 11
		}
		evs = append(evs, queue.WatchEvent{Type: queue.EventExpired, Name: "n", Revision: rev})
	}
	got := watchMessages(locks.WatchBatch{Shard: "c0", WatchBatch: queue.WatchBatch{Events: evs, Revision: 12}}, 64<<10)
	type msg struct {
		n   int
		rev int64
	}
	var out []msg
	for _, m := range got {
		out = append(out, msg{len(m.msg.Events), m.rev})
	}
	want := []msg{{50, 10}, {100, 10}, {100, 12}}
	if !slices.Equal(out, want) {
		t.Fatalf("messages %v; want %v", out, want)
	}
	if got := watchMessages(locks.WatchBatch{Shard: "c0", WatchBatch: queue.WatchBatch{Revision: 7}}, 64<<10); len(got) != 1 || got[0].msg != nil || got[0].rev != 7 {
		t.Fatalf("an empty batch gave %v; want only a revision", got)
	}
}

// A small message budget cuts messages by size too.
func TestWatchMessagesFitTheBudget(t *testing.T) {
	var evs []queue.WatchEvent
	for i := range 10 {
		evs = append(evs, queue.WatchEvent{Type: queue.EventHeld, Name: fmt.Sprintf("%0200d", i), Revision: int64(10 + i)})
	}
	got := watchMessages(locks.WatchBatch{Shard: "c0", WatchBatch: queue.WatchBatch{Events: evs, Revision: 19}}, 1000)
	n := 0
	for _, m := range got {
		if sz := proto.Size(m.msg); sz > 1000 {
			t.Errorf("a message of %d bytes; budget 1000", sz)
		}
		n += len(m.msg.Events)
	}
	if n != 10 || len(got) < 3 || got[len(got)-1].rev != 19 {
		t.Fatalf("%d messages with %d events; last revision %d", len(got), n, got[len(got)-1].rev)
	}
}
