package shard

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func cl(name string, endpoints ...string) Cluster {
	if len(endpoints) == 0 {
		endpoints = []string{"http://" + name + ":2379"}
	}
	return Cluster{Name: name, Endpoints: endpoints}
}

func mapOf(epoch uint16, clusters ...string) Map {
	m := Map{Epoch: epoch}
	for _, c := range clusters {
		m.Clusters = append(m.Clusters, cl(c))
	}
	return m
}

func withPending(m, p Map) Map { m.Pending = &p; return m }

func draining(m Map, prev []Cluster, names ...string) Map {
	m.Previous, m.Draining = prev, names
	return m
}

func TestMapValidate(t *testing.T) {
	nested := withPending(mapOf(2, "a"), withPending(mapOf(3, "a"), mapOf(4, "a")))
	tests := []struct {
		m    Map
		want string // "" for valid, else a substring of the error
	}{
		{mapOf(1, "a"), ""},
		{mapOf(MaxEpoch, "a", "b"), ""},
		{Map{Epoch: 3, Clusters: []Cluster{cl("a", "https://10.0.0.1:2379", "http://[::1]:2379")}}, ""},
		{withPending(mapOf(1, "a", "b"), mapOf(2, "a", "b", "c")), ""},
		{draining(mapOf(2, "a", "c"), []Cluster{cl("a"), cl("b")}, "b"), ""},
		{draining(mapOf(2, "a", "b", "c"), []Cluster{cl("a"), cl("b")}, "a", "b"), ""},
		{mapOf(0, "a"), "epoch 0 out of range [1, 32767]"},
		{mapOf(MaxEpoch+1, "a"), "epoch 32768 out of range [1, 32767]"},
		{mapOf(1), "no clusters"},
		{mapOf(1, "a", ""), "cluster 1 has an empty name"},
		{mapOf(1, "a", "b", "a"), `cluster "a" listed twice`},
		{Map{Epoch: 1, Clusters: []Cluster{{Name: "a"}}}, `cluster "a" has no endpoints`},
		{Map{Epoch: 1, Clusters: []Cluster{cl("a", "127.0.0.1:2379")}}, `endpoint "127.0.0.1:2379"`},
		{Map{Epoch: 1, Clusters: []Cluster{cl("a", "unix:///tmp/etcd")}}, `endpoint "unix:///tmp/etcd"`},
		{Map{Epoch: 1, Clusters: []Cluster{cl("a", "")}}, `endpoint ""`},
		{Map{Epoch: 1, Clusters: []Cluster{cl("a", "http://")}}, `endpoint "http://"`},
		{withPending(mapOf(1, "a"), mapOf(3, "a")), "pending map has epoch 3, want 2"},
		{withPending(mapOf(1, "a"), mapOf(2, "a", "a")), `pending: epoch 2: cluster "a" listed twice`},
		{nested, "pending map has a pending map itself (epoch 4)"},
		{draining(mapOf(2, "a"), nil, "b"), `draining cluster "b" is not among the previous clusters`},
		{draining(mapOf(2, "a"), []Cluster{cl("b")}, "b", "b"), `draining cluster "b" listed twice`},
		{draining(mapOf(2, "a"), []Cluster{cl("b"), cl("b")}, "b"), `previous: cluster "b" listed twice`},
	}
	for _, tt := range tests {
		err := tt.m.Validate()
		if (err == nil) != (tt.want == "") || err != nil && (!strings.Contains(err.Error(), tt.want) || !errors.Is(err, ErrInvalidMap)) {
			t.Errorf("Validate(%+v) = %v; want %q", tt.m, err, tt.want)
		}
	}
}

func TestMapJSON(t *testing.T) {
	m := withPending(mapOf(4, "a", "b"), draining(mapOf(5, "a", "b", "c"), []Cluster{cl("a"), cl("b")}, "a", "b"))
	data, err := m.Marshal()
	if err != nil {
		t.Fatalf("Marshal(%+v) = %v", m, err)
	}
	const want = `{"epoch":4,"clusters":[{"name":"a","endpoints":["http://a:2379"]},{"name":"b","endpoints":["http://b:2379"]}],` +
		`"pending":{"epoch":5,"clusters":[{"name":"a","endpoints":["http://a:2379"]},{"name":"b","endpoints":["http://b:2379"]},{"name":"c","endpoints":["http://c:2379"]}],` +
		`"previous":[{"name":"a","endpoints":["http://a:2379"]},{"name":"b","endpoints":["http://b:2379"]}],"draining":["a","b"]}}`
	if string(data) != want {
		t.Errorf("Marshal = %s; want %s", data, want)
	}
	got, err := UnmarshalMap(data)
	if err != nil || !reflect.DeepEqual(got, m) {
		t.Errorf("UnmarshalMap(Marshal(m)) = %+v, %v; want %+v", got, err, m)
	}
	for _, bad := range []string{`{`, `{"epoch":0,"clusters":[{"name":"a","endpoints":["http://a"]}]}`, `{"epoch":70000}`} {
		if _, err := UnmarshalMap([]byte(bad)); !errors.Is(err, ErrInvalidMap) {
			t.Errorf("UnmarshalMap(%s) = %v; want ErrInvalidMap", bad, err)
		}
	}
	if _, err := (Map{}).Marshal(); !errors.Is(err, ErrInvalidMap) {
		t.Errorf("Map{}.Marshal() = %v; want ErrInvalidMap", err)
	}
}

func TestMapLookups(t *testing.T) {
	m := draining(mapOf(2, "a", "c"), []Cluster{cl("a"), cl("b")}, "b")
	if c, ok := m.Cluster("b"); !ok || c.Name != "b" {
		t.Errorf("Cluster(b) = %v, %v; want the draining cluster b", c, ok)
	}
	if _, ok := m.Cluster("z"); ok {
		t.Errorf("Cluster(z) found; want not found")
	}
	r, err := m.Ring()
	if err != nil || !reflect.DeepEqual(r.Clusters(), []string{"a", "c"}) {
		t.Errorf("Ring() = %v, %v; want ring over a, c", r, err)
	}
	pr, err := m.PreviousRing()
	if err != nil || !reflect.DeepEqual(pr.Clusters(), []string{"a", "b"}) {
		t.Errorf("PreviousRing() = %v, %v; want ring over a, b", pr, err)
	}
	if pr, err := mapOf(1, "a").PreviousRing(); pr != nil || err != nil {
		t.Errorf("PreviousRing() without previous = %v, %v; want nil, nil", pr, err)
	}
}

func TestCheckTransition(t *testing.T) {
	e1 := mapOf(1, "a", "b")
	e1p := withPending(e1, mapOf(2, "a", "b", "c"))
	e2 := draining(mapOf(2, "a", "b", "c"), e1.Clusters, "a", "b")
	moved := e1
	moved.Clusters = []Cluster{cl("a", "https://a2:2379"), cl("b")}
	tests := []struct {
		cur, next Map
		want      string
	}{
		{e1, e1p, ""},
		{e1, moved, ""}, // endpoints may change
		{e1p, e2, ""},
		{e2, mapOf(2, "c", "b", "a"), ""}, // drained; order is irrelevant
		{e1p, e1, ""},                     // pending withdrawn
		{e2, e1, "epoch would go back from 2 to 1"},
		{e1, mapOf(1, "a", "b", "c"), `clusters change from ["a" "b"] to ["a" "b" "c"] within epoch 1`},
		{e1, mapOf(2, "a", "b", "c"), "epoch 2 follows epoch 1, want 2 announced as pending first"},
		{e1p, mapOf(3, "a", "b", "c"), "epoch 3 follows epoch 1"},
		{e1p, mapOf(2, "a", "c"), `epoch 2 has clusters ["a" "c"], but ["a" "b" "c"] were pending`},
	}
	for _, tt := range tests {
		err := CheckTransition(tt.cur, tt.next)
		if (err == nil) != (tt.want == "") || err != nil && (!strings.Contains(err.Error(), tt.want) || !errors.Is(err, ErrInvalidMap)) {
			t.Errorf("CheckTransition(%+v, %+v) = %v; want %q", tt.cur, tt.next, err, tt.want)
		}
	}
}
